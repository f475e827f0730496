"""The host's pipe fds: anyio byte streams over a product's stdin/stdout, and closing.

The streams are used when the product is started by the guard server, so no
``anyio.abc.Process`` owns the pipes. The fds are non-blocking; waiting goes through
``anyio.wait_readable`` / ``wait_writable``, which work on asyncio and trio alike.
"""

from __future__ import annotations

import contextlib
import os

import anyio
import anyio.abc
import anyio.lowlevel

_DEFAULT_RECEIVE = 65536


def close_quietly(*fds: int | None) -> None:
    """Close each fd that is set, ignoring errors (an fd may be closed already)."""
    for fd in fds:
        if fd is not None and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


class _FdResource:
    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    def _live_fd(self) -> int:
        if self._fd is None:
            raise anyio.ClosedResourceError
        return self._fd

    def close_now(self) -> None:
        """Close the fd without a checkpoint (safe from synchronous code)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Wakes a task blocked on it with ClosedResourceError; without an event loop in
        # this thread (RuntimeError) nobody can be waiting on it.
        with contextlib.suppress(RuntimeError):
            anyio.notify_closing(fd)
        os.close(fd)


class FdReceiveStream(_FdResource, anyio.abc.ByteReceiveStream):
    """The read end of a pipe as a ``ByteReceiveStream``."""

    async def receive(self, max_bytes: int = _DEFAULT_RECEIVE) -> bytes:
        await anyio.lowlevel.checkpoint()
        while True:
            fd = self._live_fd()
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        self.close_now()
        await anyio.lowlevel.checkpoint()


class FdSendStream(_FdResource, anyio.abc.ByteSendStream):
    """The write end of a pipe as a ``ByteSendStream``."""

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        view = memoryview(item)
        while view:
            fd = self._live_fd()
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def aclose(self) -> None:
        self.close_now()
        await anyio.lowlevel.checkpoint()
