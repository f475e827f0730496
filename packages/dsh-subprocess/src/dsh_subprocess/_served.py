"""The served spawn path: one request to this host's guard server per product.

The host sends argv, cwd and the finished environment over the server's socket, with
the product's stdio and the status pipe's write end attached; the server forks a guard
that starts the product (see ``_guard.py``). Nothing here waits for the server beyond a
bounded retry: a server that is gone, hangs or cannot take the request raises
:class:`ServerUnavailable` with nothing started, and the caller falls back to a guard of
its own.
"""

from __future__ import annotations

import marshal
import os
import time

import anyio

from . import _guard_server
from ._fdstream import FdReceiveStream, FdSendStream, close_quietly
from ._guard_server import ServerUnavailable
from ._landlock import Policy
from ._stderr import StderrObserver, start_drain
from .process import ManagedProcess, adopt
from .spec import SpawnSpec

__all__ = ["spawn_served"]

_SEND_DEADLINE_SECONDS = 30.0  # a server that has not taken a request by then is broken
_SEND_RETRY_SECONDS = 0.001


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _encode_request(spec: SpawnSpec, env: dict[str, str], policy: Policy | None) -> bytes:
    return marshal.dumps(
        (
            [os.fsencode(arg) for arg in spec.argv],
            os.fsencode(spec.cwd),
            [(os.fsencode(name), os.fsencode(value)) for name, value in env.items()],
            policy,
        )
    )


async def _send_request(server: _guard_server.GuardServer, payload: bytes, fds: list[int]) -> None:
    for attempt in (1, 2):
        deadline = time.monotonic() + _SEND_DEADLINE_SECONDS
        while True:
            try:
                server.send(payload, fds)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                await anyio.sleep(_SEND_RETRY_SECONDS)  # the server is busy forking
            except (BrokenPipeError, ConnectionError):
                break  # the server is gone
            except OSError:
                raise ServerUnavailable from None  # this request's problem (EMSGSIZE…)
        _guard_server.forget(server)
        if attempt == 2:
            break
        restarted = _guard_server.acquire()
        if restarted is None:
            break
        server = restarted
    raise ServerUnavailable


async def spawn_served(
    spec: SpawnSpec,
    env: dict[str, str],
    policy: Policy | None,
    stderr_observer: StderrObserver | None,
) -> ManagedProcess:
    """Start ``spec`` through this host's guard server, confined to ``policy`` if given.

    Raises:
        ServerUnavailable: The server could not be started, broke, or cannot take this
            request (too large); nothing of it runs.
        SpawnError: The guard could not start the program; nothing is left running.
        ConfinementUnavailableError: The kernel refused the policy; nothing started.
    """
    payload = _encode_request(spec, env, policy)
    if len(payload) > _guard_server.MAX_REQUEST_BYTES:
        raise ServerUnavailable
    server = _guard_server.acquire()
    if server is None:
        raise ServerUnavailable
    host_ends: list[int] = []
    child_ends: list[int] = []

    def pipe() -> tuple[int, int]:
        read_end, write_end = os.pipe()
        host_ends.append(read_end)  # closed on failure either way; sorted out below
        host_ends.append(write_end)
        return read_end, write_end

    def devnull() -> int:
        fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        child_ends.append(fd)
        return fd

    stdin_w = stdout_r = stderr_r = status_r = None
    try:
        if spec.stdin == "pipe":
            stdin_r, stdin_w = pipe()
            child_ends.append(stdin_r)
        else:
            stdin_r = devnull()
        if spec.stdout == "pipe":
            stdout_r, stdout_w = pipe()
            child_ends.append(stdout_w)
        else:
            stdout_w = devnull()
        if spec.stderr == "pipe":
            stderr_r, stderr_w = pipe()
            child_ends.append(stderr_w)
        elif spec.stderr == "devnull":
            stderr_w = devnull()
        elif _fd_open(2):
            stderr_w = 2  # the host's own stderr, passed through
        else:
            stderr_w = devnull()  # a closed fd 2 cannot be sent; /dev/null is the nearest
        status_r, status_w = pipe()
        child_ends.append(status_w)
        os.set_blocking(status_r, False)
        with anyio.CancelScope(shield=True):
            await _send_request(server, payload, [stdin_r, stdout_w, stderr_w, status_w])
    except BaseException:
        close_quietly(*host_ends, *child_ends)
        raise
    # The server holds its own copies now; the host keeps only its ends. What follows
    # overlaps with the server forking the guard and the guard starting the product.
    close_quietly(*child_ends)
    proc = ManagedProcess(
        spec,
        None,
        guarded=True,
        status_fd=status_r,
        lifeline_fd=None,
        stderr_drain=start_drain(stderr_r, stderr_observer),
        stdin=None if stdin_w is None else FdSendStream(stdin_w),
        stdout=None if stdout_r is None else FdReceiveStream(stdout_r),
    )
    try:
        return await adopt(proc, handshake=True)
    except ServerUnavailable:
        _guard_server.forget(server)  # dead or hanging: either way of no further use
        raise
