"""Workspace-wide test policy.

* Every async test runs on asyncio and trio unless a module narrows ``anyio_backend``.
* The test process is a child subreaper (Linux), so a descendant that escapes its
  process group is re-parented here instead of to init and cannot hide from the
  leftover check below.
* A test that leaves a process it started alive fails, after the process is killed.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from dsh_subprocess import guard_server_pid
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("DSH_HYPOTHESIS_PROFILE", "ci"))

_PR_SET_CHILD_SUBREAPER = 36
if sys.platform == "linux":
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

_LEFTOVER_GRACE_SECONDS = 3.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _live_descendants() -> dict[int, psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = proc
        except psutil.NoSuchProcess:
            pass
    return found


def _leftovers(before: set[int]) -> dict[int, psutil.Process]:
    # dsh_subprocess's per-host guard server is this process's long-lived helper, not a
    # test's leftover; the product trees it guards are its descendants and still count.
    server = guard_server_pid()
    return {p: q for p, q in _live_descendants().items() if p not in before and p != server}


def _reap_adopted_zombies() -> None:
    for proc in psutil.Process().children():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            pass


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    before = set(_live_descendants())
    yield
    deadline = time.monotonic() + _LEFTOVER_GRACE_SECONDS
    leftover = _leftovers(before)
    while leftover and time.monotonic() < deadline:
        time.sleep(0.02)
        leftover = _leftovers(before)
    described = []
    for proc in leftover.values():
        try:
            described.append(f"{proc.pid} {proc.name()} {proc.cmdline()[:3]}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(leftover.values()), timeout=2)
    _reap_adopted_zombies()
    if leftover:
        pytest.fail("test left processes behind: " + "; ".join(described))
