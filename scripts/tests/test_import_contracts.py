"""The architecture contracts (docs/architecture.md) hold, and a wrong import breaks them.

import-linter reads the contracts from the root ``pyproject.toml`` and finds each root
package on ``sys.path``. A broken tree is made by copying one distribution's import
package into a temporary directory, adding a module with a wrong import, and putting
that directory first on ``PYTHONPATH``: the copy shadows the workspace's editable
install, so the real tree is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from fresh_venv import readme_commands, run_bash

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
DEV = ROOT / "dev"


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).with_name("lint-imports")
    assert tool.is_file(), "import-linter is not installed in the dev group (uv sync --all-groups)"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(tool), "--no-cache", "--no-logo", str(PYPROJECT)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
        check=False,
    )


def _package_dir(package: str) -> Path:
    """Where the workspace keeps ``package``'s sources (its editable install points there)."""
    found = [p for p in ROOT.glob(f"*/*/src/{package}") if p.is_dir()]
    found += [p for p in ROOT.glob(f"*/src/{package}") if p.is_dir()]
    assert len(found) == 1, f"{package}: {found}"
    return found[0]


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_dev_lint_runs_the_contracts() -> None:
    assert '"$UV" run --locked lint-imports --no-cache --no-logo' in DEV.read_text("utf-8")


def test_the_documented_command_keeps_every_contract() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    commands = readme_commands(page, "lint-imports")
    # The command ./dev lint runs (there through its own uv).
    assert '"$UV" ' + commands.strip()[len("uv ") :] in DEV.read_text("utf-8")
    done = run_bash(commands, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    done = _lint_imports(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout


# (package copied, new module's source, ids of the contracts that must be reported broken)
WRONG_IMPORTS = {
    "core imports the command line": (
        "dsh_subagent",
        "from dsh_cli import cli\n",
        ["floors", "nothing-imports-cli", "subagent-core"],  # dsh_cli reaches dsh_worktree
    ),
    "bottom imports the core": ("dsh_subprocess", "import dsh_subagent\n", ["floors"]),
    "a provider imports another": (
        "dsh_subagent_codex",
        "import dsh_subagent_claude_code\n",
        ["floors", "providers"],
    ),
    "the core imports a product": ("dsh_subagent", "import claude_agent_sdk\n", ["subagent-core"]),
    "the core imports the isolation package": (
        "dsh_subagent",
        "import dsh_worktree\n",
        ["floors", "subagent-core"],
    ),
    # The two command lines sit beside each other: neither imports the other.
    "dsh_mcp imports dsh_cli": (
        "dsh_mcp",
        "from dsh_cli import batch\n",
        ["floors", "nothing-imports-cli"],
    ),
    "dsh_cli imports dsh_mcp": ("dsh_cli", "import dsh_mcp.cli\n", ["floors"]),
    "the profiles library imports the command line": (
        "dsh_profiles",
        "from dsh_cli import cli\n",
        ["floors", "nothing-imports-cli"],
    ),
    "the batch engine imports the command line": (
        "dsh_batch",
        "from dsh_cli import cli\n",
        ["floors", "nothing-imports-cli"],
    ),
    "the profiles library imports the batch engine": (
        "dsh_profiles",
        "import dsh_batch\n",
        ["floors"],
    ),
    # A module that imports the registry, which imports it back.
    "a cycle in a distribution without one": (
        "dsh_tool_jobs",
        "from dsh_tool_jobs import registry\n",
        ["acyclic"],
    ),
    # A module that imports the process, whose exit facts import it back; the result's
    # changes importing the provider types, as they did before (docs/architecture.md).
    "a cycle in dsh_subprocess": (
        "dsh_subprocess",
        "from dsh_subprocess import process\n",
        ["acyclic"],
    ),
    "a cycle in dsh_subagent": (
        "dsh_subagent",
        "from dsh_subagent import types\n",
        ["acyclic"],
    ),
}
# The module of the copy that imports ``_wrong`` back (closing a cycle), per case.
BACK_EDGES = {
    "a cycle in a distribution without one": "registry.py",
    "a cycle in dsh_subprocess": "facts.py",
    "a cycle in dsh_subagent": "changes.py",
}


@pytest.mark.parametrize("case", sorted(WRONG_IMPORTS))
def test_a_wrong_import_breaks_the_contract_it_crosses(tmp_path: Path, case: str) -> None:
    package, source, broken = WRONG_IMPORTS[case]
    overlay = tmp_path / "overlay"
    copy = overlay / package
    shutil.copytree(_package_dir(package), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "_wrong.py").write_text(source, encoding="utf-8")
    if case in BACK_EDGES:
        back = copy / BACK_EDGES[case]
        text = back.read_text(encoding="utf-8")
        back.write_text(text + f"\nfrom {package} import _wrong\n", encoding="utf-8")
    done = _lint_imports(tmp_path, pythonpath=overlay)
    report = _broken_exactly(done, broken)
    assert "._wrong" in report  # the offending module is named (relative in a cycle report)


def _broken_exactly(done: subprocess.CompletedProcess[str], broken: list[str]) -> str:
    """The report of a run that broke exactly the contracts ``broken`` (and kept the rest)."""
    assert done.returncode == 1, done.stdout + done.stderr
    # Long contract names wrap in the report: compare with whitespace collapsed.
    report = " ".join(done.stdout.split())
    contracts = _contracts()
    for contract_id in contracts:
        name = " ".join(str(contracts[contract_id]["name"]).split())
        status = "BROKEN" if contract_id in broken else "KEPT"
        assert f"{name} {status}" in report, f"{contract_id} not {status}:\n{done.stdout}"
    assert f"Contracts: {len(contracts) - len(broken)} kept, {len(broken)} broken." in report
    return report


def _kit_copy(tmp_path: Path) -> Path:
    """A copy of the kit's import package that shadows the workspace's (see the docstring)."""
    copy = tmp_path / "overlay" / "dsh_contract_tests"
    shutil.copytree(
        _package_dir("dsh_contract_tests"), copy, ignore=shutil.ignore_patterns("__pycache__")
    )
    return copy


def test_a_back_edge_in_the_kit_breaks_its_floors(tmp_path: Path) -> None:
    # The manifest is the kit's bottom floor (data); the ledger above it imports it.
    copy = _kit_copy(tmp_path)
    manifest = copy / "manifest.py"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text + "\nfrom dsh_contract_tests import ledger\n", encoding="utf-8")
    done = _lint_imports(tmp_path, pythonpath=copy.parent)
    report = _broken_exactly(done, ["acyclic", "kit-floors"])
    assert "dsh_contract_tests.manifest -> dsh_contract_tests.ledger" in report


def test_a_kit_module_without_a_floor_breaks_the_kit_floors(tmp_path: Path) -> None:
    # The kit's layers are exhaustive on purpose: a new module is placed, not left out of
    # the order (an unplaced module's imports would go unchecked).
    copy = _kit_copy(tmp_path)
    (copy / "unplaced.py").write_text("from dsh_contract_tests import manifest\n", "utf-8")
    done = _lint_imports(tmp_path, pythonpath=copy.parent)
    report = _broken_exactly(done, ["kit-floors"])
    assert "unplaced" in report


def test_no_contract_ignores_an_import() -> None:
    # An ignored import is an arrow the contracts stop seeing; none is left (dsh_mcp loads
    # profiles through dsh_profiles, `dsh mcp` finds dsh_mcp through an entry point).
    for contract_id, contract in _contracts().items():
        assert "ignore_imports" not in contract, contract_id


def test_dsh_subagent_runs_no_git_command() -> None:
    # The contracts see imports; git as a command would be a string. dsh-worktree owns
    # git, behind the isolation seam.
    sources = sorted((ROOT / "packages" / "dsh-subagent" / "src").rglob("*.py"))
    assert sources
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"""["']git["']""", text), path.relative_to(ROOT)
