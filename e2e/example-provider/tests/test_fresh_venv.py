"""The README's "Run the kit against your provider" commands really work, from wheels.

This runs the very script CI runs: wheels of the dsh libraries, the kit and the example
provider (the dsh ones shared with the scaffold's fresh-venv test), a fresh venv holding
only those wheels and their PyPI dependencies, and one pytest command that must run the
whole kit green outside the workspace. Nothing may be installed editable.
"""

from __future__ import annotations

import re
from pathlib import Path

from fresh_venv import ROOT, install_problems, run_bash

_SCRIPT = ROOT / "e2e" / "example-provider" / "scripts" / "run-kit-in-fresh-venv"
_README = ROOT / "e2e" / "example-provider" / "README.md"
_FROM_WHEELS = {"dsh-subprocess", "dsh-subagent", "dsh-contract-tests", "dsh-example-provider"}


def test_kit_runs_green_in_a_fresh_venv_from_wheels(tmp_path: Path, kit_wheels: Path) -> None:
    work = tmp_path / "kit"
    done = run_bash(f'"{_SCRIPT}" "{work}"', cwd=ROOT, env={"WHEELS": str(kit_wheels)})
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    # Skips are only the kit's opt-in continuation rules (this provider declares none).
    assert re.fullmatch(r"\d+ passed(, \d+ skipped)? in [\d.]+s( \(.*\))?", summary), summary
    assert install_problems(work / "venv" / "bin" / "python", _FROM_WHEELS) == []


def test_readme_shows_exactly_the_script_ci_runs() -> None:
    readme = _README.read_text(encoding="utf-8")
    assert "## Run the kit against your provider" in readme
    script = _SCRIPT.read_text(encoding="utf-8")
    assert script in readme, "README must show run-kit-in-fresh-venv verbatim"
