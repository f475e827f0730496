"""Fixtures of the Codex provider tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The harness module lives next to the tests; importlib mode does not add this directory.
sys.path.insert(0, str(Path(__file__).parent))

from codex_harness import FakeCodex


@pytest.fixture
def fake(tmp_path: Path) -> FakeCodex:
    """A fake app-server factory rooted in the test's temporary directory."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return FakeCodex(root=tmp_path, workspace=workspace)
