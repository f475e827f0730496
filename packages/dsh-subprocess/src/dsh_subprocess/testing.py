"""Quiescence helpers for tests: did every process a test started really go away?

Processes are held as psutil handles fenced on their create time, so a reused pid is
never mistaken for a survivor; a zombie counts as gone. :func:`host_descendants` and
:func:`product_roots` see this host's process tree the way a leftover check should: the
guard server is the host's own long-lived helper, and guards are plumbing.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

import psutil

from ._guard_server import GUARD_PATH, guard_server_pid
from ._tree import is_live

__all__ = ["alive", "host_descendants", "product_roots", "snapshot", "wait_gone"]


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


def host_descendants() -> list[psutil.Process]:
    """Every live descendant of this process except its guard server (zombies are gone).

    The trees the server guards are its descendants and are included: only the server
    itself, which outlives every tree, is left out.
    """
    server = guard_server_pid()
    try:
        found = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [proc for proc in found if proc.pid != server and is_live(proc)]


def _is_guard(proc: psutil.Process) -> bool:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return len(cmdline) > 3 and cmdline[3] == GUARD_PATH


def product_roots() -> list[psutil.Process]:
    """The first process of every tree this host spawned that is not a guard.

    A product started directly is a child of this process; a guarded one is a child of
    its guard, which is a child of this process (per-spawn guard) or of the guard server.
    A guard's environment and working directory are not the product's (a served guard
    has the server's), so checks on what a product was given look here.
    """
    roots: list[psutil.Process] = []
    for proc in host_descendants():
        try:
            parent = proc.parent()
        except psutil.Error:
            continue
        if parent is None or _is_guard(proc):
            continue
        if parent.pid == os.getpid() or _is_guard(parent):
            roots.append(proc)
    return roots
