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

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
from dsh_subprocess import testing

__all__ = ["ProcessFacts", "ProcessWatch", "Spawn", "spawns"]

_SPAWN_EVENTS = {"subprocess.Popen": (1, 3), "os.posix_spawn": (1, 2), "os.exec": (1, 2)}
"""Audit events that start a program in this process: (argv index, env index)."""


@dataclass(frozen=True, slots=True)
class Spawn:
    """A program this process started, with the environment it was given."""

    argv: str
    env: dict[str, str]


_LOCK = threading.Lock()
_COLLECTORS: list[list[Spawn]] = []
_HOOKED: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    where = _SPAWN_EVENTS.get(event)
    if where is None or not _COLLECTORS:
        return
    argv_at, env_at = where
    try:
        argv = " ".join(str(a) for a in list(args[argv_at] or [])[:4])
        env = args[env_at] if len(args) > env_at else None
        given = dict(os.environ) if env is None else {str(k): str(v) for k, v in env.items()}
    except Exception:  # an audit hook must never break a spawn
        return
    with _LOCK:
        for collector in _COLLECTORS:
            collector.append(Spawn(argv, given))


@contextmanager
def spawns() -> Iterator[list[Spawn]]:
    """Collect every program this process starts meanwhile, with its environment.

    Read from the interpreter's audit events (``subprocess.Popen``, ``os.posix_spawn``,
    ``os.exec``), which fire before the program starts: a child that lives a few
    milliseconds is still seen, and an environment passed as ``None`` (inherited) is
    recorded as this process's own. An audit hook cannot be removed, so one is installed
    per process and collects only inside this context.
    """
    with _LOCK:
        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED.append(True)
        collected: list[Spawn] = []
        _COLLECTORS.append(collected)
    try:
        yield collected
    finally:
        with _LOCK:
            _COLLECTORS.remove(collected)


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
