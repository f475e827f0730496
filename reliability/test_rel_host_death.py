"""Host death: a host running Codex, Claude Code and ACP delegations is killed."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from reliability.hostdeath import HOST_DEATH_DEADLINE, kill_host

pytestmark = [pytest.mark.anyio, pytest.mark.reliability]


@pytest.mark.parametrize("guard", ["auto", "portable"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the test side; the host is asyncio
async def test_killed_host_leaves_no_product_process(
    tmp_path: Path, how: signal.Signals, guard: str, anyio_backend: str
) -> None:
    del anyio_backend
    report = await kill_host(tmp_path, how, guard)
    # 3 products, 3 guards, 3 setsid grandchildren at least.
    assert len(report.tree) >= 9, report.tree
    assert report.survivors == [], (
        f"alive {HOST_DEATH_DEADLINE}s after {how.name} of the host: {report.survivors}"
    )
