"""Process-tree primitives over psutil and /proc. None of them raises for a vanished process."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import psutil

_DEAD_STATES = (b"Z", b"X", b"x")


def is_live(proc: psutil.Process) -> bool:
    """Tell whether ``proc`` (fenced on its create time) still runs; a zombie counts as gone."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def descendants(proc: psutil.Process, known: dict[int, psutil.Process]) -> list[psutil.Process]:
    """Every current descendant of ``proc`` (empty when it is gone).

    Handles already in ``known`` are reused, so a long-lived descendant costs one
    ``/proc`` read per call rather than a new psutil handle.
    """
    if sys.platform != "linux":
        try:
            return proc.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
    children: dict[int, list[int]] = {}
    for pid, _state, ppid, _pgrp in _linux_stats():
        children.setdefault(ppid, []).append(pid)
    found: list[psutil.Process] = []
    frontier = [proc.pid]
    while frontier:
        for pid in children.get(frontier.pop(), ()):
            frontier.append(pid)
            handle = known.get(pid)
            if handle is None:
                try:
                    handle = psutil.Process(pid)
                except psutil.Error:
                    continue
            found.append(handle)
    return found


def has_live_child(pid: int) -> bool:
    """Tell whether process ``pid`` has a child that is not a zombie (Linux; ``False`` when gone).

    Reads only ``pid``'s own ``/proc/<pid>/task/<tid>/children`` lists where the kernel has
    them (a full ``/proc`` scan otherwise).
    """
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        stats = _linux_stats()
        return any(ppid == pid and state not in _DEAD_STATES for _, state, ppid, _ in stats)
    for tid in tids:  # a child is listed under the thread that forked it
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as listing:
                kids = listing.read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                with open(b"/proc/" + kid + b"/stat", "rb") as stat:
                    data = stat.read()
            except OSError:
                continue  # reaped meanwhile
            if data[data.rfind(b")") + 2 :][:1] not in _DEAD_STATES:
                return True
    return False


def _linux_stats() -> list[tuple[int, bytes, int, int]]:
    """(pid, state, ppid, pgrp) of every process, read from ``/proc/*/stat``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    rows = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split(maxsplit=3)
        if len(fields) >= 3:
            rows.append((int(name), fields[0], int(fields[1]), int(fields[2])))
    return rows


def group_members(pgid: int) -> list[psutil.Process]:
    """The members of process group ``pgid`` that are not zombies."""
    if pgid <= 0:
        return []
    # One syscall answers the common case (the group is empty) without reading /proc.
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except OSError:
        pass  # EPERM: the group exists, owned by someone else; scan to see its members
    if sys.platform == "linux":
        pids = _linux_group_pids(pgid)
    else:
        pids = []
        for pid in psutil.pids():
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pgid:
                    pids.append(pid)
    members = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if is_live(proc):
                members.append(proc)
    return members


def _linux_group_pids(pgid: int) -> list[int]:
    return [
        pid
        for pid, state, _ppid, pgrp in _linux_stats()
        if pgrp == pgid and state not in _DEAD_STATES
    ]


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pgid``; failures (ESRCH, EPERM) are swallowed."""
    if pgid <= 0:
        return
    with contextlib.suppress(OSError):
        os.killpg(pgid, signum)


def signal_process(proc: psutil.Process, signum: int) -> None:
    """Send ``signum`` to ``proc`` unless its pid was reused; failures are swallowed."""
    with contextlib.suppress(psutil.Error, OSError):
        proc.send_signal(signum)


def kill_process(proc: psutil.Process) -> None:
    """SIGKILL ``proc`` unless its pid was reused; failures are swallowed."""
    signal_process(proc, signal.SIGKILL)


def process_group_of(proc: psutil.Process) -> int | None:
    """The process group of ``proc``, or ``None`` when it is gone."""
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None
