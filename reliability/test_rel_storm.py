"""Cancellation storm: 200 delegations with random cancel points (see storm.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from reliability.profiles import current_profile
from reliability.storm import CANCEL_POINTS, run_storm

pytestmark = [pytest.mark.anyio, pytest.mark.reliability]


# The storm itself runs on asyncio; the trio test below covers its mid-turn cancellations.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_cancellation_storm(tmp_path: Path, anyio_backend: str) -> None:
    del anyio_backend
    profile = current_profile()
    report = await run_storm(tmp_path, profile.storm_runs, profile.storm_concurrency)
    assert report.runs == profile.storm_runs
    assert report.problems == [], f"seed {report.seed}: " + "\n".join(report.problems[:20])
    assert report.settled_correctly == report.runs, f"seed {report.seed}"
    assert report.survivors == []
    assert report.fd_leak == 0
    assert report.rss_growth <= 150 * 1024 * 1024, report.rss_growth
    assert set(report.by_point) == set(CANCEL_POINTS)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_mid_turn_cancellation_storm_on_trio_abandons_no_generator(
    tmp_path: Path, anyio_backend: str
) -> None:
    del anyio_backend
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = await run_storm(tmp_path, 40, 8, points=("mid-turn",))
    assert report.passed, report.problems[:5]
    abandoned = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert abandoned == [], str(abandoned[0].message)
