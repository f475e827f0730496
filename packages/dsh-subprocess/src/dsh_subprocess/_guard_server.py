"""The per-host guard server, seen from the host: lazy start, requests, shutdown, fork.

One server per host process (Linux). It is started at the first guarded spawn as
``python -I -S _guard.py serve SOCKET_FD LIFELINE_FD`` in a new session; the host keeps
its end of a ``SOCK_SEQPACKET`` socketpair and the write end of the lifeline pipe. The
server runs on the host's death (lifeline EOF) or on :func:`shutdown_guard_server`
(both fds closed): it SIGKILLs every tree it guards and exits. A child created by
``os.fork()`` forgets its parent's server (closing its copies of both fds without
touching the server) and starts its own at its first guarded spawn.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from . import _tree

__all__ = [
    "GuardServer",
    "ServerUnavailable",
    "acquire",
    "forget",
    "guard_server_pid",
    "guard_server_pids",
    "shutdown_guard_server",
]

GUARD_PATH = str(Path(__file__).with_name("_guard.py"))

MAX_REQUEST_BYTES = 200_000  # a larger request (huge argv or env) uses a per-spawn guard
_SHUTDOWN_WAIT_SECONDS = 2.0
_AT_EXIT_WAIT_SECONDS = 1.0
_TREE_POLL_SECONDS = 0.01

enabled = sys.platform == "linux"
"""Whether guarded spawns go through the server (Linux only).

Process accounting that counts the host's descendants leaves :func:`guard_server_pid`
out (see :func:`dsh_subprocess.testing.host_descendants`): the server is a long-lived
descendant of the host, not a leftover.
"""


class ServerUnavailable(Exception):
    """The guard server could not take a request; nothing was started for it."""


class GuardServer:
    """This host's handle on one running server."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],  # noqa: TID251 - this package is the spawn seam
        sock: socket.socket,
        lifeline_w: int,
    ) -> None:
        self._popen = popen
        self._sock = sock
        self._lifeline_w: int | None = lifeline_w

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._popen.pid

    def alive(self) -> bool:
        """Tell whether the server still runs (reaping it if it has exited)."""
        return self._popen.poll() is None

    def send(self, payload: bytes, fds: list[int]) -> None:
        """Send one request; raises ``BlockingIOError`` when the queue is full, else ``OSError``."""
        self._sock.sendmsg(
            [payload],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes(fds))],
            socket.MSG_NOSIGNAL,
        )

    def close(self) -> None:
        """Close the host's ends: the server then kills what it guards and exits."""
        self._sock.close()
        fd, self._lifeline_w = self._lifeline_w, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def wait(self, timeout: float) -> None:
        """Reap the server, SIGKILLing it if it is still running after ``timeout`` seconds."""
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()

    def tree(self) -> list[psutil.Process]:
        """The server's live descendants now: its guards and the trees they guard."""
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def stop(self, timeout: float) -> None:
        """Close the host's ends and return once the server and all it guarded are gone.

        The server kills its trees and exits; one SIGKILLed after ``timeout`` leaves its
        guards to end their trees by themselves (they watch it), so those are waited for
        as well, and whatever still runs ``timeout`` seconds later is SIGKILLed: a host
        that stopped its server never leaves a guard or a product behind.
        """
        tree = self.tree()  # before closing: the server's children are ours to list now
        self.close()
        self.wait(timeout)
        deadline = time.monotonic() + timeout
        while (left := [proc for proc in tree if _tree.is_live(proc)]) and (
            time.monotonic() < deadline
        ):
            time.sleep(_TREE_POLL_SECONDS)
        for proc in left:
            _tree.kill_process(proc)
        deadline = time.monotonic() + timeout
        while any(_tree.is_live(proc) for proc in left) and time.monotonic() < deadline:
            time.sleep(_TREE_POLL_SECONDS)

    def disown(self) -> None:
        """Forget the server without signalling it (in a forked child: the parent owns it)."""
        self.close()  # closes only this process's copies: the parent's keep the server up
        # This copy of the Popen object must neither wait for nor warn about a process
        # that is not this process's child.
        self._popen.returncode = 0


def _fd_bytes(fds: list[int]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)


_lock = threading.Lock()
_current: GuardServer | None = None
# Every server this host started and has not reaped: the current one, and one being
# replaced (forget() waits for it outside the lock). Leftover checks leave them all out.
_started: list[GuardServer] = []


def _start() -> GuardServer | None:
    host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lifeline_r, lifeline_w = os.pipe()
    try:
        # Synchronous and once per host: the interpreter start-up happens in the child.
        popen = subprocess.Popen(  # noqa: TID251 - this package is the spawn seam
            [
                sys.executable,
                "-I",
                "-S",
                GUARD_PATH,
                "serve",
                str(server_end.fileno()),
                str(lifeline_r),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(server_end.fileno(), lifeline_r),
            start_new_session=True,
            cwd="/",
            env={},  # the server needs nothing from the host's environment
        )
    except OSError:
        host_end.close()
        os.close(lifeline_w)
        return None
    finally:
        server_end.close()
        os.close(lifeline_r)
    host_end.setblocking(False)
    return GuardServer(popen, host_end, lifeline_w)


def acquire() -> GuardServer | None:
    """This host's running server, started now if there is none; ``None`` if it cannot start."""
    global _current
    with _lock:
        server = _current
        if server is not None and server.alive():
            return server
        if server is not None:  # it died: its trees died with it
            server.close()
        _current = server = _start()
        if server is not None:
            _started.append(server)
        return server


def forget(server: GuardServer) -> None:
    """Stop using ``server`` (it died or broke); the next :func:`acquire` starts a new one."""
    global _current
    with _lock:
        if _current is not server:
            return
        _current = None
    server.stop(_SHUTDOWN_WAIT_SECONDS)


def guard_server_pid() -> int | None:
    """The process id of this host's guard server, or ``None`` when none is running.

    The server is a long-lived child of the host that guards its product trees; a check
    for leftover descendant processes should leave it out (the trees it guards are its
    descendants and still count).
    """
    with _lock:
        server = _current
    if server is None or not server.alive():
        return None
    return server.pid


def guard_server_pids() -> frozenset[int]:
    """The pids of every guard server this host started that it has not reaped.

    That is the running server and, while it is being replaced, the previous one (a pid
    is this host's until it reaps it, so it cannot have been reused). Dead ones are reaped
    and forgotten here.
    """
    with _lock:
        _started[:] = [server for server in _started if server.alive()]
        return frozenset(server.pid for server in _started)


def shutdown_guard_server() -> None:
    """Stop this host's guard server, if one runs, and wait until it has exited.

    Every product tree it still guards is SIGKILLed, and this returns once none of their
    processes (guards included) is alive, or a few seconds after whatever was left got
    SIGKILL by the host itself. The next guarded spawn starts a new
    server. Runs by itself at interpreter exit.
    """
    _shutdown(_SHUTDOWN_WAIT_SECONDS)


def _shutdown(wait: float) -> None:
    global _current
    with _lock:
        server, _current = _current, None
    if server is not None:
        server.stop(wait)


def _after_fork_in_child() -> None:
    global _current, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    server, _current = _current, None
    for started in _started:
        if started is not server:
            started.disown()
    _started.clear()
    if server is not None:
        server.disown()


atexit.register(_shutdown, _AT_EXIT_WAIT_SECONDS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
