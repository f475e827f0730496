"""Descriptor and pidfile probes shared by every reliability check.

The process watch itself (subreaper, new descendants, leftovers) is
:class:`dsh_subprocess.testing.ProcessWatch`.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import anyio
import psutil
from dsh_subprocess import guard_server_pid

__all__ = ["fd_count", "open_fds", "pid_alive", "wait_fds_back"]


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
