"""Puts this directory on ``sys.path``: ``test_warm`` builds on ``test_loader``'s providers."""

from __future__ import annotations

import sys
from pathlib import Path

# importlib mode does not add this directory; the helper providers live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
