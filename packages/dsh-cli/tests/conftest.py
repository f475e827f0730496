"""Fixtures of the dsh-cli tests; puts this directory on ``sys.path`` for ``cli_sandbox``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# importlib mode does not add this directory; the helper module lives next to the tests.
sys.path.insert(0, str(Path(__file__).parent))

from cli_sandbox import Sandbox, check_no_survivor, make_sandbox


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A sandbox for the real dsh executable; no process of it may outlive the test."""
    box = make_sandbox(tmp_path)
    yield box
    check_no_survivor(box)
