"""The provider recipes of the READMEs, copied verbatim into a new project, pass the whole kit.

Each fenced block of a README section that starts with a ``# <path>`` line is written to
that path of a new project; the ``pyproject.toml`` block's entry point becomes the
project's installed metadata (a ``.dist-info`` next to the package), so the kit's loader
rule finds the provider by entry point exactly as it would after ``pip install``. The kit
then runs in a nested pytest session and every rule must pass.

* The dsh-subagent README's provider example: the provider, its child, its whole
  ``pyproject.toml`` and its kit test class, in the src layout; once in a nested session
  and once as its author would run it: built as a wheel, installed with the kit's wheels
  in a fresh venv, ``python -m pytest`` in the project importing the installed wheel.
* The kit README's own example: its test class and the child of its "The child protocol"
  section, around the dsh-subagent README's provider.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from fresh_venv import install_problems, run_bash

pytest_plugins = ["pytester"]

_ROOT = Path(__file__).resolve().parents[2]
SUBAGENT_README = _ROOT / "packages" / "dsh-subagent" / "README.md"
KIT_README = _ROOT / "contract-tests" / "README.md"
SECTION = "## Writing and registering a provider (provider authors)"


def _named_blocks(text: str) -> dict[str, str]:
    """``{path: text}`` of every python or toml block whose first line names its file."""
    files: dict[str, str] = {}
    for block in re.findall(r"```(?:python|toml)\n(.*?)```", text, re.DOTALL):
        first, _, _ = block.partition("\n")
        match = re.fullmatch(r"# (\S+)(?: .*)?", first)
        if match is not None:
            files[match.group(1)] = block
    return files


def readme_files() -> dict[str, str]:
    """The named blocks of the dsh-subagent README's provider section."""
    text = SUBAGENT_README.read_text(encoding="utf-8")
    return _named_blocks(text.split(SECTION, 1)[1].split("\n## ", 1)[0])


def kit_readme_files() -> dict[str, str]:
    """The named blocks of the kit README."""
    return _named_blocks(KIT_README.read_text(encoding="utf-8"))


def _run_kit_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], *args: str
) -> pytest.RunResult:
    for path, text in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    points = tomllib.loads(files["pyproject.toml"])["project"]["entry-points"]
    src = pytester.path / "src"
    dist_info = src / "my_provider-0.0.0.dist-info"
    dist_info.mkdir()
    metadata = "Metadata-Version: 2.1\nName: my-provider\nVersion: 0.0.0\n"
    (dist_info / "METADATA").write_text(metadata)
    lines = ["[dsh.subagent.providers]"]
    lines += [f"{n} = {v}" for n, v in points["dsh.subagent.providers"].items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    # One backend (the example provider's own kit run covers trio with the same runtime),
    # chosen the way an author would, so that the run is the whole kit.
    pytester.makeconftest(
        "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
    )
    pytester.syspathinsert(src)
    # The child runs as ``python -m my_provider.child``: as if installed, it must import.
    monkeypatch.setenv("PYTHONPATH", str(src))
    return pytester.runpytest_inprocess(
        "-p", "anyio", "-p", "no:cacheprovider", "tests/test_contract.py", *args
    )


def test_the_readme_names_the_provider_its_child_its_entry_point_and_its_kit_test() -> None:
    assert sorted(readme_files()) == [
        "pyproject.toml",
        "src/my_provider/__init__.py",
        "src/my_provider/child.py",
        "tests/test_contract.py",
    ]
    project = tomllib.loads(readme_files()["pyproject.toml"])
    assert project["project"]["name"] == "my-provider"
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/my_provider"]


def test_the_kit_readme_names_its_test_class_and_its_child() -> None:
    assert sorted(kit_readme_files()) == ["src/my_provider/child.py", "tests/test_contract.py"]


_DIRECTIVE_PATTERN = re.compile(r"dsh-contract/1 \(complete\|fail\|hold[|a-z]*\) \(T-[^)]*\)")


def test_every_directive_pattern_shown_to_authors_is_the_kits() -> None:
    from dsh_contract_tests.scaffold import Scaffold
    from dsh_contract_tests.scenario import _DIRECTIVE

    texts = {
        "dsh-subagent README": SUBAGENT_README.read_text(encoding="utf-8"),
        "kit README": KIT_README.read_text(encoding="utf-8"),
        "scaffold child": Scaffold.named("acme-agent").files()["src/acme_agent/child.py"],
    }
    texts.update({str(p): p.read_text(encoding="utf-8") for p in (_ROOT / "docs").glob("*.md")})
    shown = {(where, m) for where, text in texts.items() for m in _DIRECTIVE_PATTERN.findall(text)}
    assert shown, "no directive pattern found"
    # The `recall` and `misshapen` verbs only ever reach a provider declaring continuation or
    # output_schema (opt-ins their own docs introduce), so the first-provider docs may show
    # the pattern without them.
    without_recall = _DIRECTIVE.pattern.replace("|recall", "")
    kit = {_DIRECTIVE.pattern, without_recall, without_recall.replace("|misshapen", "")}
    assert {(w, m) for w, m in shown if m not in kit} == set()


def test_the_readme_provider_passes_every_rule_of_the_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run_kit_on(pytester, monkeypatch, readme_files())
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("errors", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) == 38, result.stdout.str()
    # The opt-in rules are kit skips: this provider declares no continuation (two) and no
    # output_schema (three) and offers no ready starts (four). The confinement rules pass
    # on a kernel with Landlock (ABI 4 or later), as on the development machines.
    assert outcomes.get("skipped", 0) == 9, result.stdout.str()
    assert result.ret == pytest.ExitCode.OK
    assert "dsh-contract tests/test_contract.py::TestMyProvider: every one of its 39 rules ran" in (
        result.stdout.lines
    )


def test_the_kit_readme_example_passes_every_rule_of_the_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {**readme_files(), **kit_readme_files()}
    result = _run_kit_on(pytester, monkeypatch, files)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("errors", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) == 38, result.stdout.str()
    # The opt-in rules are kit skips: this provider declares no continuation (two) and no
    # output_schema (three) and offers no ready starts (four). The confinement rules pass
    # on a kernel with Landlock (ABI 4 or later), as on the development machines.
    assert outcomes.get("skipped", 0) == 9, result.stdout.str()
    assert result.ret == pytest.ExitCode.OK
    assert "dsh-contract tests/test_contract.py::TestMyProvider: every one of its 39 rules ran" in (
        result.stdout.lines
    )


def test_the_readme_distribution_passes_the_kit_from_wheels_in_a_fresh_venv(
    tmp_path: Path, kit_wheels: Path
) -> None:
    root = tmp_path / "my-provider"
    for path, text in readme_files().items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    commands = (
        "uv build --quiet --wheel --no-sources --out-dir dist .\n"
        "uv venv --quiet .venv\n"
        'uv pip install --quiet --no-sources --python .venv/bin/python "$WHEELS"/*.whl '
        "dist/*.whl\n"
        ".venv/bin/python -c 'import my_provider; print(my_provider.__file__)'\n"
        ".venv/bin/python -m pytest -q -p no:cacheprovider\n"
    )
    ran = run_bash(commands, cwd=root, env={"WHEELS": str(kit_wheels)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    imported, *_, summary = ran.stdout.strip().splitlines()
    # From the project directory, the installed wheel is imported, not src/.
    assert imported.startswith(str(root / ".venv" / "lib")), imported
    assert re.fullmatch(r"38 passed, 9 skipped in [\d.]+s( \(.*\))?", summary), summary
    assert install_problems(root / ".venv" / "bin" / "python", {"my-provider"}) == []
