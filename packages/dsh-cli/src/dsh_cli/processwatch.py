"""Observe the product processes a delegation starts and prove they are all gone.

A daemon thread samples this process's descendants (recursively) while the watch is
open. On Linux the process is made a child subreaper first, so a descendant that escapes
into its own session is re-parented here and stays visible instead of vanishing under
init. :meth:`ProcessWatch.survivors` lists what is still alive afterwards. The host's
dsh_subprocess guard server is its long-lived helper, not a product process, and is left
out; the product trees it guards are its descendants and are watched.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from types import TracebackType

import psutil
from dsh_subprocess import guard_server_pid

__all__ = ["ProcessWatch", "SeenProcess", "become_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); return whether it worked."""
    if sys.platform != "linux":
        return False
    status: int = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return status == 0


@dataclass(frozen=True)
class SeenProcess:
    """A descendant observed during the watch."""

    pid: int
    name: str
    create_time: float


class ProcessWatch:
    """Sample descendants every ``interval`` seconds inside a ``with`` block."""

    def __init__(self, interval: float = 0.01) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, float], SeenProcess] = {}
        self._baseline: set[int] = set()
        self._thread = threading.Thread(target=self._loop, name="dsh-process-watch", daemon=True)

    def _sample(self) -> None:
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        server = guard_server_pid()
        for child in children:
            if child.pid in self._baseline or child.pid == server:
                continue
            try:
                seen = SeenProcess(child.pid, child.name(), child.create_time())
            except psutil.Error:
                continue
            with self._lock:
                # Latest sighting wins: a child caught between fork and exec still
                # carries the parent's name (``python``) and is renamed once it execs.
                self._seen[(seen.pid, seen.create_time)] = seen

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> ProcessWatch:
        self._baseline = {p.pid for p in psutil.Process().children(recursive=True)}
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seen(self) -> tuple[SeenProcess, ...]:
        """Every new descendant observed, in order of first sighting."""
        with self._lock:
            return tuple(self._seen.values())

    def survivors(self) -> tuple[SeenProcess, ...]:
        """Observed processes still alive now (zombies adopted by us are reaped first)."""
        alive = []
        for seen in self.seen:
            try:
                proc = psutil.Process(seen.pid)
                if proc.create_time() != seen.create_time:
                    continue  # the pid was reused by an unrelated process
                if proc.status() == psutil.STATUS_ZOMBIE:
                    if proc.ppid() == os.getpid():
                        os.waitpid(seen.pid, os.WNOHANG)
                    continue
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
            alive.append(seen)
        return tuple(alive)
