"""Fixtures: a real git repository in a temporary directory, and a file-writing provider.

``HOME``, ``XDG_CACHE_HOME`` and git's global configuration point into the test's
temporary directory, so the default worktree root and git's settings never touch the
real home.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from dsh_worktree.testing import private_git_env, scratch_repository

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for name, value in private_git_env(home).items():
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture
def repo(tmp_path: Path, private_home: Path) -> Path:
    """A repository with a few committed files, a .gitignore and one commit on main."""
    files = {
        "shared.txt": "original\n",
        "gone.txt": "to be deleted\n",
        "sub/inner.txt": "inner\n",
        ".gitignore": "*.log\n",
    }
    return scratch_repository(tmp_path / "repo", files)
