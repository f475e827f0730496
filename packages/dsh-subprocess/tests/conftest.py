"""Fixtures shared by the dsh-subprocess tests (real processes, no OS mocks)."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest
from dsh_subprocess import _guard_server, guard_server_pid, shutdown_guard_server
from dsh_subprocess.testing import alive


@pytest.fixture(autouse=True)
def guard_server_left_idle(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Shut an idle guard server down after each test, before the leftover check.

    The server is this host's long-lived helper, not something a test left running; the
    trees it guards still are, so a server that still guards a live tree is left for the
    root conftest to report.
    """
    monkeypatch.setattr(_guard_server, "enabled", True)
    yield
    pid = guard_server_pid()
    if pid is None:
        return
    try:
        guarded_trees = alive(psutil.Process(pid).children())
    except psutil.NoSuchProcess:
        guarded_trees = []
    if not guarded_trees:
        shutdown_guard_server()


@pytest.fixture(params=["server", "per-spawn", "direct"])
def guarded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test under the guard server, under a per-spawn guard, and without a guard."""
    mode = str(request.param)
    monkeypatch.setattr(_guard_server, "enabled", mode == "server")
    return mode != "direct"
