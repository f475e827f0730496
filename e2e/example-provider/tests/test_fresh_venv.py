"""The README's "Run the kit against your provider" commands really work, offline.

This runs the very script CI runs: workspace wheels of the dsh libraries, a fresh venv,
``uv pip install ./contract-tests ./e2e/example-provider`` and one pytest command that
must run the whole kit green outside the workspace.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
_SCRIPT = _ROOT / "e2e" / "example-provider" / "scripts" / "run-kit-in-fresh-venv"
_README = _ROOT / "e2e" / "example-provider" / "README.md"


def _uv() -> str:
    found = shutil.which("uv") or str(_ROOT / ".tools" / "bin" / "uv")
    assert Path(found).exists(), "uv is needed to build the fresh venv (./dev installs it)"
    return found


def test_kit_runs_green_in_a_fresh_venv(tmp_path: Path) -> None:
    env = {**os.environ, "UV": _uv(), "PYTHON": sys.executable}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [str(_SCRIPT), str(tmp_path / "kit")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in [\d.]+s( \(.*\))?", summary), summary
    installed = tmp_path / "kit" / "venv" / "lib"
    assert list(installed.glob("python3*/site-packages/dsh_contract_tests/plugin.py"))


def test_readme_shows_exactly_the_script_ci_runs() -> None:
    readme = _README.read_text(encoding="utf-8")
    assert "## Run the kit against your provider" in readme
    script = _SCRIPT.read_text(encoding="utf-8")
    assert script in readme, "README must show run-kit-in-fresh-venv verbatim"
