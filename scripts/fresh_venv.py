"""Fresh-venv installs from built wheels, as the contract kit's README tells a newcomer.

Helpers of the fresh-venv tests:

* :func:`build_kit_wheels`: the wheels of ``dsh-subprocess``, ``dsh-subagent`` and
  ``dsh-contract-tests``, built by running the kit README's "build-kit-wheels" commands
  verbatim (the root conftest's session fixture ``kit_wheels`` calls it once per session,
  so every fresh-venv test shares them);
* :func:`readme_commands`: the fenced bash block after a ``<!-- ci: NAME -->`` marker;
* :func:`run_bash`: run such commands with ``uv`` on ``PATH`` and outside any venv;
* :func:`install_problems`: whatever a venv holds installed editable or from a
  directory, read from each distribution's ``direct_url.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "KIT_README",
    "ROOT",
    "build_kit_wheels",
    "direct_urls",
    "install_problems",
    "readme_commands",
    "run_bash",
]

ROOT = Path(__file__).resolve().parents[1]
KIT_README = ROOT / "contract-tests" / "README.md"

_KIT_WHEELS = ("dsh_contract_tests", "dsh_subagent", "dsh_subprocess")
_TIMEOUT = 900  # seconds: builds, a cold dependency download and a whole kit run


def readme_commands(text: str, name: str) -> str:
    """The bash block following ``<!-- ci: name -->`` in ``text``, dedented."""
    match = re.search(
        rf"^[ \t]*<!-- ci: {re.escape(name)} -->\n([ \t]*)```bash\n(.*?)^\1```",
        text,
        re.MULTILINE | re.DOTALL,
    )
    assert match is not None, f"no bash block marked <!-- ci: {name} -->"
    return textwrap.dedent(match.group(2))


def _uv_bin() -> str:
    found = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    assert Path(found).exists(), "uv is needed to build the fresh venv (./dev installs it)"
    return str(Path(found).parent)


def run_bash(
    commands: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``commands`` with ``bash -euo pipefail`` outside this test venv; output captured."""
    full = {**os.environ, **(env or {})}
    full.pop("VIRTUAL_ENV", None)
    full["PATH"] = os.pathsep.join([_uv_bin(), full.get("PATH", "")])
    full.setdefault("PYTHON", sys.executable)
    full.setdefault("UV_PYTHON", sys.executable)  # the venv's interpreter: this one's
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )


def direct_urls(python: Path) -> dict[str, dict[str, Any] | None]:
    """Each distribution of the venv of ``python`` with its ``direct_url.json`` (or None)."""
    script = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name']: d.read_text('direct_url.json') "
        "for d in m.distributions()}))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    raw: dict[str, str | None] = json.loads(done.stdout)
    return {name: None if text is None else json.loads(text) for name, text in raw.items()}


def install_problems(python: Path, from_wheels: set[str]) -> list[str]:
    """What is wrong with the venv of ``python``: an editable install or one from a
    directory anywhere, or a distribution of ``from_wheels`` not installed from a
    ``.whl`` file (empty when every install is a built wheel or comes from the index)."""
    problems: list[str] = []
    urls = direct_urls(python)
    for name in sorted(from_wheels - urls.keys()):
        problems.append(f"{name} is not installed")
    for name, direct in sorted(urls.items()):
        if direct is not None and "dir_info" in direct:
            problems.append(f"{name} is installed from a directory: {direct}")
        elif name in from_wheels and (
            direct is None
            or "archive_info" not in direct
            or not str(direct.get("url", "")).endswith(".whl")
        ):
            problems.append(f"{name} is not installed from a wheel file: {direct}")
    return problems


def build_kit_wheels(wheels: Path) -> Path:
    """Build the three dsh wheels into ``wheels`` with the kit README's own commands."""
    commands = readme_commands(KIT_README.read_text(encoding="utf-8"), "build-kit-wheels")
    done = run_bash(commands, cwd=ROOT, env={"WHEELS": str(wheels)})
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(path.name.split("-", 1)[0] for path in wheels.glob("*.whl"))
    assert built == sorted(_KIT_WHEELS), built
    return wheels
