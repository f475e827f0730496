"""The two run profiles: ``ci`` (what ``./dev test`` runs) and ``nightly``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

__all__ = ["PROFILES", "Profile", "current_profile"]

MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Profile:
    """Sizes and counts of one profile.

    Attributes:
        name: ``ci`` or ``nightly``.
        flood_bytes: Bytes a flooding product writes to stdout and to stderr.
        oversize_bytes: Length of one oversized stdout line.
        storm_runs: Delegations in the cancellation storm.
        storm_concurrency: Delegations in flight at once during the storm.
    """

    name: str
    flood_bytes: int
    oversize_bytes: int
    storm_runs: int
    storm_concurrency: int


PROFILES: Final = {
    "ci": Profile(
        "ci", flood_bytes=8 * MIB, oversize_bytes=2 * MIB, storm_runs=200, storm_concurrency=12
    ),
    "nightly": Profile(
        "nightly",
        flood_bytes=128 * MIB,
        oversize_bytes=64 * MIB,
        storm_runs=1000,
        storm_concurrency=16,
    ),
}


def current_profile() -> Profile:
    """The profile named by ``DSH_RELIABILITY_PROFILE`` (default ``ci``)."""
    return PROFILES[os.environ.get("DSH_RELIABILITY_PROFILE", "ci")]
