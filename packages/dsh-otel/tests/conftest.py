"""Fixtures of the dsh-otel tests: an in-memory SDK per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Helper modules live next to the tests; importlib mode does not add this directory.
sys.path.insert(0, str(Path(__file__).parent))

from otel_capture import Captured, capture


@pytest.fixture
def captured() -> Iterator[Captured]:
    with capture() as running:
        yield running
