"""The provider recipes of the READMEs, copied verbatim into a new project, pass the whole kit.

Each fenced block of a README section that starts with a ``# <path>`` line is written to
that path of a new project; the ``pyproject.toml`` block's entry point becomes the
project's installed metadata (a ``.dist-info`` next to the package), so the kit's loader
rule finds the provider by entry point exactly as it would after ``pip install``. The kit
then runs in a nested pytest session and every rule must pass.

* The dsh-subagent README's provider example: the provider, its child, its entry point
  and its kit test class.
* The kit README's own example: its test class and the child of its "The child protocol"
  section, around the dsh-subagent README's provider.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

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
    dist_info = pytester.path / "my_provider-0.0.0.dist-info"
    dist_info.mkdir()
    metadata = "Metadata-Version: 2.1\nName: my-provider\nVersion: 0.0.0\n"
    (dist_info / "METADATA").write_text(metadata)
    lines = ["[dsh.subagent.providers]"]
    lines += [f"{n} = {v}" for n, v in points["dsh.subagent.providers"].items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    pytester.syspathinsert(pytester.path)
    # The child runs as ``python -m my_provider.child``: as if installed, it must import.
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    return pytester.runpytest_inprocess(
        "-p", "anyio", "-p", "no:cacheprovider", "tests/test_contract.py", *args
    )


def test_the_readme_names_the_provider_its_child_its_entry_point_and_its_kit_test() -> None:
    assert sorted(readme_files()) == [
        "my_provider/__init__.py",
        "my_provider/child.py",
        "pyproject.toml",
        "tests/test_contract.py",
    ]


def test_the_kit_readme_names_its_test_class_and_its_child() -> None:
    assert sorted(kit_readme_files()) == ["my_provider/child.py", "tests/test_contract.py"]


def test_the_readme_provider_passes_every_rule_of_the_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One backend: the example provider's own kit run covers trio with the same runtime.
    result = _run_kit_on(pytester, monkeypatch, readme_files(), "-k", "not trio")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("errors", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) == 32, result.stdout.str()
    # The two opt-in continuation rules skip: this provider declares no continuation.
    assert outcomes.get("skipped", 0) == 2, result.stdout.str()


def test_the_kit_readme_example_passes_every_rule_of_the_kit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {**readme_files(), **kit_readme_files()}
    result = _run_kit_on(pytester, monkeypatch, files, "-k", "not trio")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("errors", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) == 32, result.stdout.str()
    # The two opt-in continuation rules skip: this provider declares no continuation.
    assert outcomes.get("skipped", 0) == 2, result.stdout.str()
