"""Fixtures shared by the dsh-subprocess tests (real processes, no OS mocks)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[True, False], ids=["guard", "direct"])
def guarded(request: pytest.FixtureRequest) -> bool:
    """Run a test with and without the host-death guard."""
    return bool(request.param)
