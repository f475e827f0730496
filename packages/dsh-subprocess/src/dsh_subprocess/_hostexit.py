"""The synchronous host-exit kill path: every live tree is SIGKILLed when the host exits."""

from __future__ import annotations

import atexit
import contextlib
import threading
from typing import Protocol


class _Killable(Protocol):
    def kill_tree_now(self) -> None: ...


_lock = threading.RLock()  # reentrant: the kill path may run in a signal handler
_live: dict[int, _Killable] = {}


def register(proc: _Killable) -> None:
    with _lock:
        _live[id(proc)] = proc


def unregister(proc: _Killable) -> None:
    with _lock:
        _live.pop(id(proc), None)


def kill_all_trees_now() -> None:
    """SIGKILL every process tree spawned by this host that is not yet known to be gone.

    Synchronous: no awaits, no threads, no logging; each tree's failure is contained.
    Registered with :mod:`atexit`; a host that installs its own fatal-signal handler can
    call it there too. Trees leave the registry once their whole-tree exit is observed.
    """
    with _lock:
        targets = list(_live.values())
    for proc in targets:
        with contextlib.suppress(Exception):
            proc.kill_tree_now()


atexit.register(kill_all_trees_now)
