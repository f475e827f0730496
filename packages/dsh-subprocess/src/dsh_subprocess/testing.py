"""Quiescence helpers for tests: did every process a test started really go away?

Processes are held as psutil handles fenced on their create time, so a reused pid is
never mistaken for a survivor; a zombie counts as gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable

import psutil

from ._tree import is_live

__all__ = ["alive", "snapshot", "wait_gone"]


def snapshot(pids: Iterable[int]) -> list[psutil.Process]:
    """Handles for those of ``pids`` that exist now."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    return procs


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes among ``procs`` that still run (zombies count as gone)."""
    return [proc for proc in procs if is_live(proc)]


def wait_gone(procs: Iterable[psutil.Process], within: float) -> list[psutil.Process]:
    """Block until none of ``procs`` runs or ``within`` seconds pass; return the survivors."""
    procs = list(procs)
    deadline = time.monotonic() + within
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left
