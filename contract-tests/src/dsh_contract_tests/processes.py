"""Observe the process tree a run creates, without any help from the provider.

The kit cannot ask a provider which processes belong to its run (that would trust the
code under test), so it watches the test process's own descendants: whatever appears
after a baseline belongs to the run under test. The test process is made a child
subreaper on Linux, so a grandchild that escapes its process group (``setsid``) is
re-parented here instead of to init and stays visible. The host's dsh_subprocess guard
server is the host's long-lived helper, not part of any run, and is left out; the trees
it guards are its descendants and count. The watch is
:class:`dsh_subprocess.testing.ProcessWatch`, plus what the kit reads about a run's
processes (their cwd and environment).
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
from dsh_subprocess import testing

__all__ = ["ProcessFacts", "ProcessWatch"]


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """What the kit read about one live process of the run's tree."""

    pid: int
    ppid: int
    name: str
    cwd: str | None
    environ: dict[str, str] | None


class ProcessWatch(testing.ProcessWatch):
    """Processes that appeared since the watch began (the run under test's tree).

    Zombies count as gone: they run nothing and hold no resource but a pid.
    :meth:`kill_leftovers` kills what is left and describes each process with its pid
    and command line: the kit reports leftovers as a rule failure and must not leak them
    into the next test.
    """

    def __init__(self) -> None:
        testing.become_subreaper()
        super().__init__()

    @property
    def ever_seen(self) -> int:
        """How many distinct new processes :meth:`alive` has observed so far."""
        return len(self.seen)

    def facts(self) -> list[ProcessFacts]:
        """Cwd and environment of every live new process (``None`` where unreadable)."""
        return _facts([seen.process for seen in self.alive()])

    def roots(self) -> list[ProcessFacts]:
        """The new processes the provider spawned: the first non-guard one of each tree.

        A dsh_subprocess guard is plumbing whose cwd and environment are not the
        product's (a served guard carries the guard server's), so it is skipped.
        """
        return _facts(self.product_roots())


def _facts(procs: list[psutil.Process]) -> list[ProcessFacts]:
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
