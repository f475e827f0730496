"""Process-tree and file-descriptor probes shared by every reliability check."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from pathlib import Path

import anyio
import psutil
from dsh_subprocess import guard_server_pid
from dsh_subprocess.testing import host_descendants

__all__ = [
    "become_subreaper",
    "fd_count",
    "live_descendants",
    "open_fds",
    "pid_alive",
    "reap_adopted_zombies",
    "wait_fds_back",
]

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt orphaned descendants (Linux), so an escapee cannot hide from the probes.

    The root ``conftest.py`` does the same for pytest; ``python -m reliability`` calls it.
    """
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def live_descendants() -> dict[int, psutil.Process]:
    """Every live (non-zombie) descendant of this process, less its guard server.

    dsh_subprocess's per-host guard server is the host's long-lived helper, not a
    survivor; the product trees it guards are its descendants and still count.
    """
    return {proc.pid: proc for proc in host_descendants()}


def reap_adopted_zombies() -> None:
    """Reap zombie children this process adopted as a subreaper.

    Call it only when no managed process of ours is still being waited for.
    """
    for proc in psutil.Process().children():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            pass


def open_fds() -> dict[int, str]:
    """This process's open descriptors and what they point at."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return found


# The host keeps two descriptors per guard server: its end of the request socketpair and
# the lifeline pipe's write end (dsh_subprocess README, "The guard server").
_GUARD_SERVER_FDS = 2


def fd_count() -> int:
    """How many descriptors this process holds (``/proc/self/fd``), less its guard server's.

    The guard server is started by the first guarded spawn and outlives every run, so the
    two descriptors the host keeps for it are not a run's leak.
    """
    count = len(os.listdir("/proc/self/fd"))
    return count - _GUARD_SERVER_FDS if guard_server_pid() is not None else count


async def wait_fds_back(before: int, within: float = 2.0) -> int:
    """Wait until at most ``before`` descriptors are open; return the excess (0 if none).

    Pipes are closed by drain threads shortly after a tree exits, hence the deadline.
    """
    deadline = time.monotonic() + within
    # Descriptor counts have no event to wait on.
    while (excess := fd_count() - before) > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
        await anyio.sleep(0.02)
    return max(0, excess)


def pid_alive(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` when that process still runs (zombies count as gone)."""
    try:
        pid = int(pidfile.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else pid
    except psutil.NoSuchProcess:
        return None
