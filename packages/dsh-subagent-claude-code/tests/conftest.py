"""Make the sibling helper modules (``claude_harness``) importable under importlib mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from claude_harness import Standin, new_standin  # noqa: E402


@pytest.fixture
def standin(tmp_path: Path) -> Standin:
    """A stand-in CLI scenario rooted in ``tmp_path``."""
    return new_standin(tmp_path)
