"""Fixtures: a real git repository in a temporary directory, and a file-writing provider.

``HOME``, ``XDG_CACHE_HOME`` and git's global configuration point into the test's
temporary directory, so the default worktree root and git's settings never touch the
real home.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from worktree_doubles import git_out


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n",
        encoding="utf-8",
    )
    return home


@pytest.fixture
def repo(tmp_path: Path, private_home: Path) -> Path:
    """A repository with a few committed files, a .gitignore and one commit on main."""
    root = tmp_path / "repo"
    root.mkdir()
    git_out(root, "init", "--quiet")
    (root / "shared.txt").write_text("original\n", encoding="utf-8")
    (root / "gone.txt").write_text("to be deleted\n", encoding="utf-8")
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("inner\n", encoding="utf-8")
    (root / ".gitignore").write_text("*.log\n", encoding="utf-8")
    git_out(root, "add", "--all")
    git_out(root, "commit", "--quiet", "-m", "initial")
    return root
