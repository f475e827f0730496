"""``python -m dsh_contract_tests new NAME DIR`` writes a provider that passes the kit as is.

The CI run does what the kit README tells a newcomer, with its own commands: in an empty
directory, install the kit's wheels (built once per session by the README's commands)
into a venv and generate the distribution with it, then run the generated README's "Run
the kit" commands (its own wheel and the dsh wheels in a fresh venv) and the kit; every
keyless and loader rule passes, and nothing is installed editable.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dsh_contract_tests.__main__ import main
from dsh_contract_tests.scaffold import Scaffold, ScaffoldError, write_scaffold
from fresh_venv import KIT_README, install_problems, readme_commands, run_bash

_NEW = [sys.executable, "-m", "dsh_contract_tests", "new"]


def _new(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_NEW, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_scaffold_is_a_complete_distribution(tmp_path: Path) -> None:
    done = _new("acme-agent", "acme", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    root = tmp_path / "acme"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        ".gitignore",
        "README.md",
        "pyproject.toml",
        "src/acme_agent/__init__.py",
        "src/acme_agent/child.py",
        "src/acme_agent/config.py",
        "src/acme_agent/provider.py",
        "src/acme_agent/py.typed",
        "tests/test_contract.py",
    ]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "acme-agent"
    points = project["entry-points"]["dsh.subagent.providers"]
    assert points == {"acme-agent": "acme_agent:AcmeAgentProvider"}
    test = (root / "tests" / "test_contract.py").read_text(encoding="utf-8")
    assert 'entry_point_name = "acme-agent"' in test
    assert "pyproject.toml" in done.stdout


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Acme_Agent", "invalid provider name 'Acme_Agent': use lowercase letters"),
        ("acme--agent", "invalid provider name 'acme--agent'"),
        ("class", "invalid provider name 'class': class is a Python keyword"),
        ("json", "invalid provider name 'json': its package json would shadow the importable"),
    ],
)
def test_a_bad_name_is_refused_and_nothing_is_written(
    tmp_path: Path, name: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", name, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dsh_contract_tests new: {message}"), err
    assert err.count("\n") == 1, "one line, no traceback"
    assert not (tmp_path / "out").exists()


def test_a_non_empty_directory_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(ScaffoldError, match="already exists and is not an empty directory"):
        write_scaffold("acme-agent", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]


def test_the_kit_readme_shows_the_generated_readmes_commands() -> None:
    generated = Scaffold.named("acme-agent").files()["README.md"]
    kit = KIT_README.read_text(encoding="utf-8")
    assert readme_commands(generated, "install-and-run") == readme_commands(kit, "install-and-run")
    assert readme_commands(generated, "verify") == readme_commands(kit, "verify")


def test_the_generated_code_is_typed_strictly(tmp_path: Path) -> None:
    write_scaffold("acme-agent", tmp_path / "acme")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "src", "tests"],
        cwd=tmp_path / "acme",
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_makes_wheels_an_absolute_path(tmp_path: Path) -> None:
    # Step 3 runs in the provider's directory: a WHEELS relative to step 1's would break it.
    block = readme_commands(KIT_README.read_text(encoding="utf-8"), "wheels-dir")
    shown = run_bash(block + 'echo "$WHEELS"\n', cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert Path(shown.stdout.strip()).is_absolute(), shown.stdout
    assert Path(shown.stdout.strip()).parent == tmp_path


def test_the_unmodified_scaffold_passes_the_kit_from_wheels_in_a_fresh_venv(
    tmp_path: Path, kit_wheels: Path
) -> None:
    # Steps 2 and 3 of the kit README, in an empty directory: the scaffold from a venv
    # holding only the kit's wheels, then the generated README's commands.
    kit = KIT_README.read_text(encoding="utf-8")
    wheels = {"WHEELS": str(kit_wheels)}
    made = run_bash(readme_commands(kit, "scaffold"), cwd=tmp_path, env=wheels)
    assert made.returncode == 0, made.stdout + made.stderr
    root = tmp_path / "acme-agent"
    commands = readme_commands((root / "README.md").read_text(encoding="utf-8"), "install-and-run")
    ran = run_bash(commands, cwd=root, env=wheels)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    summary = ran.stdout.strip().splitlines()[-1]
    # Every keyless and loader rule, once (asyncio): passed, none opted out; only the
    # opt-in rules skip (the unmodified scaffold declares no continuation, two, and no
    # output_schema, three, and offers no ready starts, four).
    account = (
        "dsh-contract tests/test_contract.py::TestAcmeAgentContract: every one of its 39 rules ran"
    )
    assert account in ran.stdout.splitlines(), ran.stdout  # the line the kit README shows
    match = re.fullmatch(r"(\d+) passed, 9 skipped in [\d.]+s( \(.*\))?", summary)
    assert match is not None, summary
    assert int(match.group(1)) == 38, summary
    from_wheels = {"dsh-subprocess", "dsh-subagent", "dsh-contract-tests", "acme-agent"}
    assert install_problems(root / ".venv" / "bin" / "python", from_wheels) == []
    assert (
        install_problems(tmp_path / "kit-venv" / "bin" / "python", from_wheels - {"acme-agent"})
        == []
    )
