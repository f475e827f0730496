"""Each distribution's released API matches its committed snapshot.

A failure here means a public name or signature changed. If the change is intended, run
``uv run python scripts/api_snapshot.py`` and review the snapshot diff against
VERSIONING.md (a removal or incompatible change needs a major version).
"""

from __future__ import annotations

import api_snapshot
import pytest


@pytest.mark.parametrize("distribution", sorted(api_snapshot.DISTRIBUTIONS))
def test_public_api_matches_snapshot(distribution: str) -> None:
    path = api_snapshot.SNAPSHOT_DIR / f"{distribution}.txt"
    live = api_snapshot.snapshot(api_snapshot.DISTRIBUTIONS[distribution])
    assert path.exists(), f"no API snapshot for {distribution}: run scripts/api_snapshot.py"
    assert live == path.read_text(encoding="utf-8")


def test_snapshot_detects_a_changed_signature() -> None:
    """The renderer is sensitive to signatures, not just names."""

    def before(a: int, b: str = "x") -> None: ...

    def after(a: int, b: str = "y") -> None: ...

    assert api_snapshot._signature(before) != api_snapshot._signature(after)
