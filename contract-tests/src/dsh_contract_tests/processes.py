"""Observe the process tree a run creates, without any help from the provider.

The kit cannot ask a provider which processes belong to its run (that would trust the
code under test), so it watches the test process's own descendants: whatever appears
after a baseline belongs to the run under test. The test process is made a child
subreaper on Linux, so a grandchild that escapes its process group (``setsid``) is
re-parented here instead of to init and stays visible. The host's dsh_subprocess guard
server is the host's long-lived helper, not part of any run, and is left out; the trees
it guards are its descendants and count.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from dataclasses import dataclass

import psutil
from dsh_subprocess.testing import host_descendants, product_roots

__all__ = ["ProcessFacts", "ProcessWatch", "make_subreaper"]

_PR_SET_CHILD_SUBREAPER = 36
_subreaper_done = False


def make_subreaper() -> None:
    """Make this process a child subreaper (Linux; a no-op elsewhere and when repeated)."""
    global _subreaper_done
    if _subreaper_done or sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _subreaper_done = True


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """What the kit read about one live process of the run's tree."""

    pid: int
    ppid: int
    name: str
    cwd: str | None
    environ: dict[str, str] | None


def _live_descendants() -> dict[int, psutil.Process]:
    return {proc.pid: proc for proc in host_descendants()}


def _reap_adopted_zombies() -> None:
    for proc in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)


class ProcessWatch:
    """Processes that appeared since the watch began (the run under test's tree).

    Zombies count as gone: they run nothing and hold no resource but a pid.
    """

    def __init__(self) -> None:
        make_subreaper()
        self._baseline = frozenset(_live_descendants())
        self._seen: dict[int, str] = {}

    def alive(self) -> list[psutil.Process]:
        """Live processes started since the baseline (also remembered as seen)."""
        live = [p for pid, p in _live_descendants().items() if pid not in self._baseline]
        for proc in live:
            if proc.pid not in self._seen:
                with contextlib.suppress(psutil.Error):
                    self._seen[proc.pid] = f"{proc.pid} {proc.name()} {proc.cmdline()[:3]}"
        return live

    @property
    def ever_seen(self) -> int:
        """How many distinct new processes :meth:`alive` has observed so far."""
        return len(self._seen)

    def describe(self, procs: list[psutil.Process]) -> str:
        """A short human description of ``procs`` for an assertion message."""
        return "; ".join(self._seen.get(p.pid, str(p.pid)) for p in procs)

    def facts(self) -> list[ProcessFacts]:
        """Cwd and environment of every live new process (``None`` where unreadable)."""
        return self._facts(self.alive())

    def _facts(self, procs: list[psutil.Process]) -> list[ProcessFacts]:
        out: list[ProcessFacts] = []
        for proc in procs:
            try:
                ppid, name = proc.ppid(), proc.name()
            except psutil.Error:
                continue
            cwd: str | None
            environ: dict[str, str] | None
            try:
                cwd = proc.cwd()
            except psutil.Error:
                cwd = None
            try:
                environ = proc.environ()
            except psutil.Error:
                environ = None
            out.append(ProcessFacts(proc.pid, ppid, name, cwd, environ))
        return out

    def roots(self) -> list[ProcessFacts]:
        """The new processes the provider spawned: the first non-guard one of each tree.

        A dsh_subprocess guard is plumbing whose cwd and environment are not the
        product's (a served guard carries the guard server's), so it is skipped.
        """
        self.alive()  # remember every new process as seen
        return self._facts([p for p in product_roots() if p.pid not in self._baseline])

    def kill_leftovers(self) -> list[str]:
        """Kill every live new process; returns their descriptions (empty when quiescent).

        The kit reports leftovers as a rule failure and must not leak them into the next
        test, so it removes them after recording what they were.
        """
        leftover = self.alive()
        described = [self._seen.get(p.pid, str(p.pid)) for p in leftover]
        for proc in leftover:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(leftover, timeout=2)
        _reap_adopted_zombies()
        return described
