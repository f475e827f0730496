"""Quiescence helpers for tests: did every process a test started really go away?

Processes are held as psutil handles fenced on their create time, so a reused pid is
never mistaken for a survivor; a zombie counts as gone, and so does a process that has
already released its memory on the way out (it runs no more code; a served guard is
caught so right after it closed the status pipe the host waits on). :func:`host_descendants`
and :func:`product_roots` see this host's process tree the way a leftover check should:
the guard servers are the host's own long-lived helpers (every one it started and has not
reaped, so one being replaced too), and guards are plumbing.

:class:`ProcessWatch` is the leftover check itself: it records a baseline, lists what
started since, waits for it to go, and kills and describes what did not. Call
:func:`become_subreaper` first (Linux) so that a descendant which escapes into its own
session is re-parented to this process and stays visible instead of vanishing under init.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import shlex
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType

import psutil

from ._direct import PORTABLE_GUARD_PATH
from ._guard_server import GUARD_PATH, guard_server_pids
from ._tree import is_live as _running

__all__ = [
    "ProcessWatch",
    "SeenProcess",
    "alive",
    "become_subreaper",
    "host_descendants",
    "product_roots",
    "reap_adopted_zombies",
    "snapshot",
    "wait_gone",
]

_PR_SET_CHILD_SUBREAPER = 36
_ARGV_KEPT = 8  # arguments kept per seen process: a product chooses its children's argv
_ARG_CHARS = 120
_KILL_WAIT_SECONDS = 2.0


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); return whether it is one now.

    An orphaned descendant (say a ``setsid`` grandchild whose parent exited) is then
    re-parented to this process instead of to init, so it stays in
    :func:`host_descendants`; this process must then reap what it adopts
    (:func:`reap_adopted_zombies`). Repeating the call is harmless. Elsewhere it does
    nothing and returns ``False``. A library never calls it: only a test process or a
    program that watches its own tree on purpose.
    """
    if sys.platform != "linux":
        return False
    status: int = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return status == 0


def reap_adopted_zombies() -> None:
    """Reap every zombie child of this process (the orphans a subreaper adopted).

    Call it only when no process this host manages is still being waited for: a managed
    child's exit status would be taken from its owner.
    """
    for proc in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)


def snapshot(pids: Iterable[int]) -> list[psutil.Process]:
    """Handles for those of ``pids`` that exist now."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    return procs


def _is_live(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs: not gone, not a zombie, not past releasing its memory.

    A process in the kernel's exit path has no address space any more (its virtual size
    reads 0) before it becomes a zombie; between the two it closes its files, so a host
    waiting for a pipe's EOF can see it "running" for a moment. It runs no more code.
    """
    if not _running(proc):
        return False
    try:
        return bool(proc.memory_info().vms)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # unreadable is not gone


def alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes among ``procs`` that still run (zombies and exiting ones count as gone)."""
    return [proc for proc in procs if _is_live(proc)]


def _wait_for_an_exit(procs: list[psutil.Process], timeout: float) -> None:
    """Block until one of ``procs`` exits or ``timeout`` seconds pass.

    A pidfd (Linux 5.3+) becomes readable when its process exits, so this waits on the
    exit itself; where there is none it sleeps a hundredth of a second instead.
    """
    fds: list[int] = []
    try:
        for proc in procs:
            try:
                fds.append(os.pidfd_open(proc.pid))
            except ProcessLookupError:
                return  # gone already
            except (AttributeError, OSError):
                time.sleep(min(timeout, 0.01))
                return
            if not proc.is_running():
                return  # the pid was reused after our process exited
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        poller.poll(max(1, math.ceil(timeout * 1000)))
    finally:
        for fd in fds:
            os.close(fd)


def wait_gone(procs: Iterable[psutil.Process], within: float) -> list[psutil.Process]:
    """Block until none of ``procs`` runs or ``within`` seconds pass; return the survivors."""
    procs = list(procs)
    deadline = time.monotonic() + within
    while (left := alive(procs)) and (remaining := deadline - time.monotonic()) > 0:
        _wait_for_an_exit(left, remaining)
    return left


def host_descendants() -> list[psutil.Process]:
    """Every live descendant of this process except its guard servers (zombies are gone).

    The trees a server guards are its descendants and are included: only the servers
    themselves, which outlive every tree, are left out (the running one and one being
    replaced).
    """
    try:
        found = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    # Read after the listing: a server started meanwhile is registered by now, so it is
    # never listed (a watch would otherwise remember it as a process that started).
    servers = guard_server_pids() | _server_children(found)
    return [proc for proc in found if proc.pid not in servers and _is_live(proc)]


def _server_children(found: Iterable[psutil.Process]) -> frozenset[int]:
    """This host's direct children running the guard in server mode.

    The registry can miss one (a server being started or replaced when it was read), yet
    a direct child of the host with the server's argv is a server and never a leftover;
    a served guard's parent is its server, not the host, so it still counts.
    """
    me = os.getpid()
    servers: set[int] = set()
    for proc in found:
        try:
            if proc.ppid() == me and _is_guard(proc) and proc.cmdline()[4] == "serve":
                servers.add(proc.pid)
        except (psutil.Error, IndexError):
            continue
    return frozenset(servers)


def _is_guard(proc: psutil.Process) -> bool:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return len(cmdline) > 3 and cmdline[3] in (GUARD_PATH, PORTABLE_GUARD_PATH)


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


@dataclass(frozen=True, slots=True)
class SeenProcess:
    """A process a :class:`ProcessWatch` saw start, as it was when last seen.

    ``argv`` keeps at most 8 arguments of at most 120 characters each: a product picks
    its own children's command lines. ``str()`` gives ``"<pid> (<name>) <argv>"``.
    """

    pid: int
    name: str
    argv: tuple[str, ...]
    process: psutil.Process = field(repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.pid} ({self.name}) {shlex.join(self.argv)}".rstrip()


def _key(proc: psutil.Process) -> tuple[int, float] | None:
    try:
        return proc.pid, proc.create_time()
    except psutil.Error:
        return None


def _sighting(proc: psutil.Process, before: SeenProcess | None) -> SeenProcess | None:
    try:
        name = proc.name()
        argv = tuple(arg[:_ARG_CHARS] for arg in proc.cmdline()[:_ARGV_KEPT])
    except psutil.AccessDenied:
        # Unreadable is not gone: it still runs and must still be listed.
        return before or SeenProcess(proc.pid, "?", (), proc)
    except psutil.Error:
        return before  # it exited while being read
    if not argv and before is not None:
        return before  # a zombie reads as an empty argv: keep the last real sighting
    return SeenProcess(proc.pid, name, argv, proc)


class ProcessWatch:
    """The processes this host starts from now on: list them, wait for them, clean up.

    Construction records a baseline: the host's live descendants (less its guard
    servers), fenced on create time. :meth:`alive` then lists every live process started
    since: the new descendants, and any process seen before that is no longer a
    descendant but still runs (it escaped while this process was no subreaper). A guard
    server this host has not reaped at the time of the call is never listed. Every
    process listed is remembered in :attr:`seen`, latest sighting winning: a child
    caught between fork and exec still carries its parent's name.

    Used as a context manager, a daemon thread also samples every ``interval`` seconds,
    so :attr:`seen` includes processes that came and went in between. The watch never
    makes this process a subreaper by itself: see :func:`become_subreaper`.
    """

    def __init__(self, interval: float = 0.01) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, float], SeenProcess] = {}
        self._baseline = {key for proc in host_descendants() if (key := _key(proc))}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def alive(self) -> list[SeenProcess]:
        """Every live process started since the baseline (and remember each as seen)."""
        found = {key: proc for proc in host_descendants() if (key := _key(proc))}
        # A guard server is never a leftover, even when a sample caught it unregistered
        # (being started, or being replaced): left out by the servers' pids as they are now.
        servers = guard_server_pids()
        with self._lock:
            for key, proc in found.items():
                if key in self._baseline:
                    continue
                if (seen := _sighting(proc, self._seen.get(key))) is not None:
                    self._seen[key] = seen
            servers |= _server_children(seen.process for seen in self._seen.values())
            return [
                seen
                for key, seen in self._seen.items()
                if seen.pid not in servers and (key in found or _is_live(seen.process))
            ]

    @property
    def seen(self) -> tuple[SeenProcess, ...]:
        """Every process seen since the baseline, in order of first sighting."""
        with self._lock:
            return tuple(self._seen.values())

    def product_roots(self) -> list[psutil.Process]:
        """:func:`product_roots` among the processes started since the baseline."""
        self.alive()
        return [proc for proc in product_roots() if _key(proc) not in self._baseline]

    def wait_gone(self, within: float) -> list[SeenProcess]:
        """Wait until no process started since the baseline runs, at most ``within`` s.

        Returns what still runs then. The list is taken afresh after every exit, so a
        process started meanwhile is waited for too.
        """
        deadline = time.monotonic() + within
        while (left := self.alive()) and (remaining := deadline - time.monotonic()) > 0:
            _wait_for_an_exit([seen.process for seen in left], remaining)
        return left

    def kill_leftovers(self) -> list[str]:
        """SIGKILL every process started since the baseline; describe each (``str``).

        Waits for them to exit and reaps the zombies this process adopted (see
        :func:`reap_adopted_zombies` for when that is safe). Empty when nothing was left.
        """
        leftover = self.alive()
        for seen in leftover:
            with contextlib.suppress(psutil.Error):
                seen.process.kill()
        wait_gone([seen.process for seen in leftover], _KILL_WAIT_SECONDS)
        reap_adopted_zombies()
        return [str(seen) for seen in leftover]

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            self.alive()

    def __enter__(self) -> ProcessWatch:
        if self._thread is not None:
            raise RuntimeError("a ProcessWatch samples only once")
        self._thread = threading.Thread(target=self._sample, name="dsh-process-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.alive()
