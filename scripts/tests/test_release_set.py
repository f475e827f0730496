"""The release set is exactly VERSIONING.md's lockstep list; the example provider stays out."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import api_snapshot
import notices
import pytest
import release_set

ROOT = Path(__file__).resolve().parents[2]


def _versioning_names() -> list[str]:
    text = (ROOT / "VERSIONING.md").read_text(encoding="utf-8")
    lockstep = text.split("\n\n")[1]  # the paragraph after the title names the set
    assert "lockstep" in lockstep
    return re.findall(r"`(dsh-[a-z-]+)`", lockstep)


def _pyproject(path: Path) -> dict[str, object]:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def _workspace_members() -> dict[str, Path]:
    root = _pyproject(ROOT / "pyproject.toml")
    members: list[str] = root["tool"]["uv"]["workspace"]["members"]  # type: ignore[index]
    found = {}
    for pattern in members:
        for directory in sorted(ROOT.glob(pattern)):
            project = _pyproject(directory / "pyproject.toml")["project"]
            found[project["name"]] = directory  # type: ignore[index]
    return found


def test_the_release_set_is_exactly_versionings_lockstep_list() -> None:
    assert _versioning_names() == list(release_set.RELEASE_SET)
    assert len(release_set.RELEASE_SET) == 9


def test_every_workspace_member_is_released_or_says_why_not() -> None:
    members = set(_workspace_members())
    assert members == set(release_set.RELEASE_SET) | set(release_set.NOT_RELEASED)
    assert not set(release_set.RELEASE_SET) & set(release_set.NOT_RELEASED)


def test_snapshots_and_notices_cover_the_same_set() -> None:
    # Snapshot keys are distributions, or "<distribution>.<module>" for a second module.
    snapshotted = {key.split(".", 1)[0] for key in api_snapshot.DISTRIBUTIONS}
    assert snapshotted == set(release_set.RELEASE_SET)
    assert notices.UNPUBLISHED - {"dsh-workspace"} == set(release_set.NOT_RELEASED)


def test_only_unreleased_members_refuse_uploads() -> None:
    for name, directory in _workspace_members().items():
        project = _pyproject(directory / "pyproject.toml")["project"]
        private = "Private :: Do Not Upload" in project.get("classifiers", [])  # type: ignore[attr-defined]
        assert private == (name in release_set.NOT_RELEASED), name


def test_ci_builds_the_release_set_and_not_every_workspace_package() -> None:
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    assert "--all-packages" not in workflow
    assert "scripts/release_set.py build dist" in workflow
    checker = (ROOT / ".github" / "workflows" / "check_dists.py").read_text(encoding="utf-8")
    assert "release_set.check(" in checker


def _touch(directory: Path, *names: str) -> Path:
    directory.mkdir()
    for name in names:
        (directory / name).write_bytes(b"")
    return directory


def _release_files() -> list[str]:
    files = []
    for name in release_set.RELEASE_SET:
        module = name.replace("-", "_")
        files += [f"{module}-0.1.0-py3-none-any.whl", f"{module}-0.1.0.tar.gz"]
    return files


def test_check_accepts_exactly_the_release_set(tmp_path: Path) -> None:
    dist = _touch(tmp_path / "dist", *_release_files(), ".gitignore")
    assert release_set.check(dist) == []


@pytest.mark.parametrize(
    ("extra", "drop", "problem"),
    [
        (
            ["dsh_example_provider-0.1.0-py3-none-any.whl"],
            None,
            "not in the release set: dsh-example-provider",
        ),
        ([], "dsh_cli-0.1.0.tar.gz", "dsh-cli: expected one wheel and one sdist"),
        (["notes.txt"], None, "not in the release set: ? (notes.txt)"),
    ],
)
def test_check_refuses_anything_else(
    tmp_path: Path, extra: list[str], drop: str | None, problem: str
) -> None:
    files = [f for f in _release_files() if f != drop] + extra
    problems = release_set.check(_touch(tmp_path / "dist", *files))
    assert any(p.startswith(problem) for p in problems), problems
