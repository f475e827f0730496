"""The handle on one product tree, from spawn to observed whole-tree exit.

:func:`~dsh_subprocess.spawn` builds it (through the guard server, a per-spawn guard or
directly); from then on this module owns observation (exit facts, tree liveness) and
the TERM → grace → KILL teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable

import anyio
import anyio.abc
import anyio.lowlevel
import psutil

from . import _hostexit, _tree
from ._fdstream import FdReceiveStream, FdSendStream, close_quietly
from ._guard_server import ServerUnavailable
from ._status import StatusPipe
from ._stderr import StderrDrain
from ._until_exit import StdoutUntilExit
from .errors import ConfinementUnavailableError, DshSubprocessError, SpawnError
from .facts import ExitFacts, signal_name
from .spec import SpawnSpec

__all__ = ["ManagedProcess", "adopt"]

_POLL_SECONDS = 0.01
_DISCOVERY_INTERVAL_SECONDS = 0.1  # how often a guarded tree is re-walked while waiting
_DIRECT_DISCOVERY_SECONDS = 0.03
_GUARD_SELF_EXIT_SECONDS = 0.5  # after the product is SIGKILLed the guard reaps and reports
_GUARD_EXIT_SECONDS = 5.0  # a guard with nothing left to reap exits at once; bound a stopped one
_KILL_RETRY_SECONDS = 1.0
_DRAIN_JOIN_SECONDS = 1.0
_GUARD_START_SECONDS = 30.0  # a server that has not forked the guard by then is broken


def _facts_from_returncode(code: int) -> ExitFacts:
    if code < 0:
        return ExitFacts(exit_code=None, signal=signal_name(-code))
    return ExitFacts(exit_code=code, signal=None)


async def _poll_until(condition: Callable[[], bool], interval: float = _POLL_SECONDS) -> None:
    # Pull-based by design: exits and tree liveness have no event source we own.
    while not condition():  # noqa: ASYNC110
        await anyio.sleep(interval)


class ManagedProcess(anyio.abc.AsyncResource):
    """One product process and its whole tree, from spawn to observed whole-tree exit.

    Created by :func:`spawn`. Usable from any task of the event loop it was spawned on.
    Observation is pull-based: the awaiting call polls, nothing runs in the background
    except the stderr drain thread.
    """

    def __init__(
        self,
        spec: SpawnSpec,
        process: anyio.abc.Process | None,
        *,
        guarded: bool,
        portable: bool = False,
        status_fd: int | None,
        lifeline_fd: int | None,
        stderr_drain: StderrDrain | None,
        stdin: anyio.abc.ByteSendStream | None = None,
        stdout: anyio.abc.ByteReceiveStream | None = None,
    ) -> None:
        # ``process`` is the guard or the product, our child. Without it the guard server
        # forks the guard (not our child), which reports its pid (``G``) on the status pipe.
        self._spec = spec
        self._process = process
        self._guarded = guarded
        # A portable guard is no subreaper: it alone knows the members that left its
        # subtree, so the host asks it to kill ("K" on the lifeline) rather than killing it.
        self._portable = portable
        self._status = StatusPipe(status_fd)
        self._lifeline_fd = lifeline_fd
        self._stderr_drain = stderr_drain
        self._status_waiting = False  # one task at a time may wait on the status fd
        if process is not None:
            self._root_pid = process.pid
            self._stdin, self._stdout = process.stdin, process.stdout
        else:
            self._root_pid = -1  # until the guard reports ``G``
            self._stdin, self._stdout = stdin, stdout
        self._root = None if self._root_pid < 0 else self._psutil_or_none(self._root_pid)
        self._product_pid = self._root_pid if not guarded else -1
        self._product: psutil.Process | None = None if guarded else self._root
        self._known: dict[int, psutil.Process] = {}
        self._facts: ExitFacts | None = None
        self._tree_gone = False
        # A served guard's subtree cannot be left: its guard and the server are subreapers,
        # and the server kills the orphans of a guard killed early. So no /proc walk is
        # needed before signalling; the escalation and periodic waits still walk it.
        self._served = process is None
        self._last_discovery = time.monotonic() if self._served else float("-inf")
        self._terminating: anyio.Event | None = None
        self._terminate_facts: ExitFacts | None = None
        self._terminate_error: BaseException | None = None
        self._resources_closed = False
        self._spawn_errno: int | None = None
        self._confine_errno: int | None = None  # the kernel refused the confinement
        self._confined = False  # set by spawn() once a policy was applied
        _hostexit.register(self)

    @staticmethod
    def _psutil_or_none(pid: int) -> psutil.Process | None:
        try:
            return psutil.Process(pid)
        except psutil.Error:
            return None

    # -- public surface -------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The product process id (never the guard's)."""
        return self._product_pid

    @property
    def spec(self) -> SpawnSpec:
        """The validated spec this process was spawned from."""
        return self._spec

    @property
    def guarded(self) -> bool:
        """Whether the product runs under the host-death guard."""
        return self._guarded

    @property
    def confined(self) -> bool:
        """Whether the product's tree runs under a Landlock ruleset (applied before it ran).

        ``False`` for a spec without confinement, with ``mode="off"``, and for
        ``mode="auto"`` where the kernel offers no Landlock.
        """
        return self._confined

    @property
    def stdin(self) -> anyio.abc.ByteSendStream | None:
        """The product's stdin (``stdin="pipe"`` only)."""
        return self._stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream | None:
        """The product's stdout (``stdout="pipe"`` only)."""
        return self._stdout

    def stdout_until_exit(self, drain: float) -> StdoutUntilExit:
        """The product's stdout, ending at EOF or ``drain`` seconds after the product exited.

        A descendant in its own session may hold stdout open after the product is gone;
        this stream still ends (see :class:`StdoutUntilExit`).

        Raises:
            DshSubprocessError: When stdout is not piped.
        """
        if self._stdout is None:
            raise DshSubprocessError("stdout is not piped")
        return StdoutUntilExit(self, self._stdout, drain)

    @property
    def exit_facts(self) -> ExitFacts | None:
        """How the product process ended, or ``None`` while it has not been seen to end."""
        return self._poll_facts()

    async def wait(self) -> ExitFacts:
        """Wait for the product process (not its tree) to end.

        Under the Linux guard it also waits (at most a few seconds) for the guard to exit
        when the product left nothing alive, so no process of the tree runs when it
        returns; a guard that still reaps live descendants is not waited for.

        Returns:
            Its exit facts. Descendants may still be alive: see :meth:`wait_tree_exit`.
        """
        await self._poll_until(lambda: self._poll_facts() is not None)
        facts = self._poll_facts()
        assert facts is not None
        if self._guarded and not self._portable and sys.platform == "linux":
            # The guard reports the exit before it reaps what is left and exits itself:
            # a guard with nothing left to reap is waited for, so that a caller who acts
            # on the product's end (a result) never leaves its guard running.
            with anyio.move_on_after(_GUARD_EXIT_SECONDS):
                await self._poll_until(self._guard_done)
        return facts

    async def wait_tree_exit(self) -> None:
        """Wait until no process of the tree is alive (zombies count as gone). Sends nothing."""
        await self._poll_until(self._tree_gone_now)

    def tree_alive(self) -> bool:
        """Tell whether any process of the tree is alive now."""
        return bool(self._live_members(discover=True))

    def tree_pids(self) -> frozenset[int]:
        """The live pids known to belong to the tree (the guard's included)."""
        return frozenset(self._live_members(discover=True))

    def detach_stderr_observer(self) -> None:
        """Stop forwarding stderr lines; the pipe keeps being drained."""
        if self._stderr_drain is not None:
            self._stderr_drain.detach()

    async def terminate(self) -> ExitFacts:
        """Terminate the whole tree and wait until none of it is alive.

        SIGTERM goes to every live member of the tree: to the process group, and to each
        descendant that left it (``setsid``, double fork). Under the host-death guard the
        guard passes it on to those (it is their subreaper); without it the host sends
        it to those found by a snapshot taken before signalling. After ``spec.grace``
        seconds SIGKILL goes to the group and to every descendant found by that snapshot
        or discovered since. Nothing is signalled once whole-tree absence has been
        observed. The teardown is shielded
        from cancellation, and it is memoised: concurrent and repeated calls share one
        outcome.

        Returns:
            The product's exit facts.
        """
        if self._terminating is None:
            self._terminating = anyio.Event()
            try:
                with anyio.CancelScope(shield=True):
                    self._terminate_facts = await self._teardown()
            except Exception as exc:
                self._terminate_error = exc
            finally:
                self._terminating.set()
            # Deliver a cancellation that arrived while the teardown was shielded.
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            await self._terminating.wait()
        if self._terminate_error is not None:
            raise DshSubprocessError("process tree teardown failed") from self._terminate_error
        assert self._terminate_facts is not None
        return self._terminate_facts

    async def aclose(self) -> None:
        """Same as :meth:`terminate`, for ``async with``."""
        await self.terminate()

    def kill_tree_now(self) -> None:
        """SIGKILL the whole tree at once, synchronously (the host-exit path). Never raises."""
        if self._tree_gone:
            return
        with contextlib.suppress(Exception):
            if self._portable and self._root_alive():
                # The guard kills what it has seen, escapees included, then exits.
                self._ask_guard_to_kill()
                for proc in self._live_members(discover=True).values():
                    if proc.pid != self._root_pid:
                        _tree.kill_process(proc)
                return
            for proc in self._live_members(discover=True).values():
                if proc.pid != self._root_pid:
                    _tree.kill_process(proc)
            if self._root is not None and _tree.is_live(self._root):
                _tree.signal_group(self._root_pid, signal.SIGKILL)
                _tree.kill_process(self._root)
        self._close_lifeline()

    # -- observation ----------------------------------------------------------------

    def _discovery_due(self) -> bool:
        # Under the guard, discovery only refreshes tree_pids(): the guard's own liveness
        # already covers every descendant. Without it, discovery is what keeps escapees known.
        interval = _DISCOVERY_INTERVAL_SECONDS if self._guarded else _DIRECT_DISCOVERY_SECONDS
        return time.monotonic() - self._last_discovery >= interval

    def _guard_done(self) -> bool:
        """Whether the guard has exited, or stays because the product left live children.

        Its own exit is seen by pid (a zombie counts as gone), not by the status pipe's
        EOF: the kernel closes a process's files before it becomes a zombie.
        """
        root = self._root
        if root is None or not _tree.is_live(root):
            return True
        # The guard is the tree's subreaper: once the product is gone, every live member
        # descends from one of the guard's own children.
        return _tree.has_live_child(root.pid)

    def _root_alive(self) -> bool:
        if self._process is None:
            # A served guard holds the status pipe's only write end until it exits.
            self._read_status()
            return not self._status.eof
        return (
            self._process.returncode is None
            and self._root is not None
            and _tree.is_live(self._root)
        )

    def _live_members(self, *, discover: bool) -> dict[int, psutil.Process]:
        if self._tree_gone:
            return {}
        live: dict[int, psutil.Process] = {}
        root = self._root
        if root is not None and self._root_alive():
            live[root.pid] = root
            if discover:
                self._last_discovery = time.monotonic()
                for proc in _tree.descendants(root, self._known):
                    self._known.setdefault(proc.pid, proc)
        for pid, proc in list(self._known.items()):
            if _tree.is_live(proc):
                live[pid] = proc
            else:
                del self._known[pid]
        if not live:
            # Orphans left in the group (no guard, or the guard was killed) still count.
            for proc in _tree.group_members(self._root_pid):
                self._known[proc.pid] = proc
                live[proc.pid] = proc
        if not live:
            self._observe_tree_gone()
        return live

    def _observe_tree_gone(self) -> None:
        self._tree_gone = True
        self._known.clear()
        _hostexit.unregister(self)
        self._close_lifeline()

    def _ask_guard_to_kill(self) -> None:
        """Tell a portable guard to SIGKILL every member it has seen, then close the lifeline."""
        fd = self._lifeline_fd
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"K")
        self._close_lifeline()

    def _close_lifeline(self) -> None:
        fd, self._lifeline_fd = self._lifeline_fd, None
        close_quietly(fd)

    def _read_status(self) -> None:
        for kind, number in self._status.read():
            self._apply_status(kind, number)

    def _apply_status(self, kind: str, number: int) -> None:
        if kind == "G" and self._process is None and self._root_pid < 0:
            self._root_pid = number
            self._root = self._psutil_or_none(number)
        elif kind == "P":
            self._product_pid = number
            self._product = self._psutil_or_none(number)
        elif kind == "X" and self._facts is None:
            self._facts = ExitFacts(exit_code=number, signal=None)
        elif kind == "S" and self._facts is None:
            self._facts = ExitFacts(exit_code=None, signal=signal_name(number))
        elif kind == "E":
            self._spawn_errno = number
        elif kind == "L":
            self._confine_errno = number

    def _poll_facts(self) -> ExitFacts | None:
        if self._facts is not None:
            return self._facts
        if not self._guarded:
            assert self._process is not None
            code = self._process.returncode
            if code is not None:
                self._facts = _facts_from_returncode(code)
            return self._facts
        self._read_status()
        if self._facts is None and (self._process is None or self._process.returncode is not None):
            # The guard is gone; whatever it reported is in the pipe by now.
            self._read_status()
            if self._facts is None and self._status.eof:
                # The guard was killed before it could reap the product (the host-exit
                # path): its own end says nothing about the product's, so nothing is known.
                self._facts = ExitFacts(exit_code=None, signal=None)
        return self._facts

    async def _handshake(self) -> None:
        """Wait for the guard to report the product's pid, or why it could not start it."""
        while True:
            self._read_status()
            if self._product_pid > 0:
                return
            if self._confine_errno is not None:
                refused = self._confine_errno
                cause = OSError(refused, os.strerror(refused))
                raise ConfinementUnavailableError(errno=refused) from cause
            code = self._spawn_errno
            if code is not None:
                cause = OSError(code, os.strerror(code)) if code else OSError("exec failed")
                raise SpawnError(errno=code or None) from cause
            fd = self._status.fd
            if fd is None:
                if self._process is None and self._root_pid < 0:
                    raise ServerUnavailable  # no guard was forked: the server died
                raise SpawnError(errno=None) from None
            if self._process is None and self._root_pid < 0:
                # Shielded: a forked guard is never left unknown to a cancelled spawn.
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(_GUARD_START_SECONDS) as timeout:
                        await anyio.wait_readable(fd)
                    if timeout.cancelled_caught:
                        raise ServerUnavailable  # the server hangs
            else:
                await anyio.wait_readable(fd)

    async def _poll_until(
        self, condition: Callable[[], bool], interval: float = _POLL_SECONDS
    ) -> None:
        """Poll ``condition``; under the guard, status pipe traffic wakes the poll early.

        The guard writes the product's exit and closes the pipe when it exits, which it
        does only once nothing of the tree is left (it is the tree's subreaper).
        """
        while not condition():
            fd = self._status.fd
            if fd is None or self._status_waiting:
                await anyio.sleep(interval)
                continue
            self._status_waiting = True
            try:
                with anyio.move_on_after(interval):
                    await anyio.wait_readable(fd)
            except anyio.ClosedResourceError:
                pass
            finally:
                self._status_waiting = False
            self._read_status()  # consume it, or the fd stays readable

    def _discard_unstarted(self) -> None:
        """Drop a served spawn that never got a guard (nothing of it runs)."""
        _hostexit.unregister(self)
        self._tree_gone = True
        for stream in (self._stdin, self._stdout):
            if isinstance(stream, (FdReceiveStream, FdSendStream)):
                stream.close_now()
        drain, self._stderr_drain = self._stderr_drain, None
        if drain is not None:
            drain.detach()
        self._status.close()

    # -- teardown -------------------------------------------------------------------

    async def _poll_until_gone(self, seconds: float) -> bool:
        with anyio.move_on_after(seconds):
            await self._poll_until(self._tree_gone_now)
            return True
        return False

    def _tree_gone_now(self) -> bool:
        return not self._live_members(discover=self._discovery_due())

    def _send_term(self) -> None:
        """SIGTERM to every live member of the tree, inside the root's group or not."""
        if self._portable and self._root is not None and self._root_alive():
            # The portable guard alone is sent SIGTERM: it first looks at the tree once
            # more (a member that left the group is still a descendant of the product
            # until the product dies), then signals the group and every member outside it.
            _tree.signal_process(self._root, signal.SIGTERM)
            return
        _tree.signal_group(self._root_pid, signal.SIGTERM)
        if self._guarded and self._root_alive():
            # The guard leads the group, so it got that SIGTERM too, and passes it on to
            # every descendant outside the group: it is their subreaper and sees them all.
            return
        # No guard (or it is gone): the members known from the pre-signal snapshot that
        # left the group (``setsid``, a group of their own) get it one by one.
        for proc in list(self._known.values()):
            if _tree.is_live(proc) and _tree.process_group_of(proc) != self._root_pid:
                _tree.signal_process(proc, signal.SIGTERM)

    async def _kill_round(self) -> None:
        if self._portable and self._root_alive():
            self._ask_guard_to_kill()
        members = self._live_members(discover=True)
        for pid, proc in members.items():
            if pid != self._root_pid:
                _tree.kill_process(proc)
        if self._guarded and self._root_alive():
            # Let the guard reap the product and report its facts before it is killed.
            with anyio.move_on_after(_GUARD_SELF_EXIT_SECONDS):
                await self._poll_until(lambda: not self._root_alive(), _POLL_SECONDS / 2)
        if self._live_members(discover=True):
            _tree.signal_group(self._root_pid, signal.SIGKILL)
            if self._root is not None:
                _tree.kill_process(self._root)

    async def _teardown(self) -> ExitFacts:
        if self._live_members(discover=not self._served):  # the snapshot, before any signal
            self._send_term()
            if not await self._poll_until_gone(self._spec.grace):
                while self._live_members(discover=True):
                    await self._kill_round()
                    await self._poll_until_gone(_KILL_RETRY_SECONDS)
        await self._close_resources()
        facts = self._poll_facts()
        assert facts is not None
        return facts

    async def _close_resources(self) -> None:
        if self._resources_closed:
            return
        self._resources_closed = True
        if self._process is not None:
            await self._process.aclose()
        else:
            for stream in (self._stdin, self._stdout):
                if stream is not None:
                    await stream.aclose()
        drain = self._stderr_drain
        if drain is not None:
            with anyio.move_on_after(_DRAIN_JOIN_SECONDS):
                await _poll_until(lambda: drain.done)
            drain.detach()
        self._read_status()
        self._status.close()
        self._close_lifeline()


async def adopt(proc: ManagedProcess, *, handshake: bool) -> ManagedProcess:
    """Hand out a newly started tree's handle, or tear the tree down: every spawn path's tail.

    Under a guard it first waits for the guard's report that the product started. A
    cancellation that arrived meanwhile is delivered after the tree was torn down: a
    cancelled spawn never hands out a process.

    Raises:
        ServerUnavailable: The guard server forked no guard for this request; nothing of
            it runs, the handle is discarded and the caller may fall back.
        SpawnError: The guard could not start the product; nothing is left running.
    """
    try:
        if handshake:
            await proc._handshake()
        await anyio.lowlevel.checkpoint_if_cancelled()
    except ServerUnavailable:
        proc._discard_unstarted()
        raise
    except BaseException:
        with anyio.CancelScope(shield=True):
            await proc.terminate()
        raise
    return proc
