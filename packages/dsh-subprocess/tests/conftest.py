"""Fixtures shared by the dsh-subprocess tests (real processes, no OS mocks)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import psutil
import pytest
from dsh_subprocess import (
    ManagedProcess,
    _guard_server,
    _tree,
    guard_server_pid,
    shutdown_guard_server,
)
from dsh_subprocess._spawn import GUARD_MODE_VARIABLE
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


@pytest.fixture(params=["server", "per-spawn", "portable", "direct"])
def guarded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test under the guard server, a per-spawn guard, the portable guard, and none.

    The portable guard is the one macOS and the BSDs get; here it is forced through the
    documented setting, so the same cases run against it on Linux.
    """
    mode = str(request.param)
    if mode in ("server", "per-spawn") and sys.platform != "linux":
        pytest.skip("the Linux guard exists on Linux only; the portable guard runs here")
    monkeypatch.setattr(_guard_server, "enabled", mode == "server")
    if mode == "portable":
        monkeypatch.setenv(GUARD_MODE_VARIABLE, "portable")
    else:
        monkeypatch.delenv(GUARD_MODE_VARIABLE, raising=False)
    return mode != "direct"


@pytest.fixture
def guard_mode(guarded: bool) -> str:
    """The mode the ``guarded`` fixture chose: server, per-spawn, portable or direct."""
    if not guarded:
        return "direct"
    if os.environ.get(GUARD_MODE_VARIABLE) == "portable":
        return "portable"
    return "server" if _guard_server.enabled else "per-spawn"


@pytest.fixture
def sent_signals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every signal the host sends to a tree from now on, in order (still delivered).

    Tests assert on these events (was SIGKILL needed? did SIGTERM come first?) instead
    of on how long a teardown took. Signals a guard sends are not seen here.
    """
    sent: list[int] = []
    real_group, real_process = _tree.signal_group, _tree.signal_process

    def signal_group(pgid: int, signum: int) -> None:
        sent.append(signum)
        real_group(pgid, signum)

    def signal_process(proc: psutil.Process, signum: int) -> None:
        sent.append(signum)
        real_process(proc, signum)

    # The host's escalation under the portable guard is a request to the guard (which
    # then SIGKILLs what it has seen): it is the host's SIGKILL, carried by the guard.
    real_ask = ManagedProcess._ask_guard_to_kill

    def ask_guard_to_kill(self: ManagedProcess) -> None:
        sent.append(signal.SIGKILL)
        real_ask(self)

    monkeypatch.setattr(_tree, "signal_group", signal_group)
    monkeypatch.setattr(_tree, "signal_process", signal_process)
    monkeypatch.setattr(ManagedProcess, "_ask_guard_to_kill", ask_guard_to_kill)
    return sent
