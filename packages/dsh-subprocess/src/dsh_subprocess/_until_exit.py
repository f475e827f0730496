"""A product's stdout that ends at EOF or a short drain after the product exited.

A product's descendant may call ``setsid`` and inherit its stdout, so EOF can come long
after the product is gone, or never. Whatever the product wrote before it exited is
already in the pipe: a short drain window after the exit is enough to deliver it.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import anyio.abc

from .facts import ExitFacts

__all__ = ["ExitingProcess", "StdoutUntilExit"]


class ExitingProcess(Protocol):
    """What the stream watches of its product (a ``ManagedProcess``): its exit.

    A protocol, not ``ManagedProcess`` itself, so that ``process`` (which builds this
    stream) stays the only one of the two to import the other.
    """

    @property
    def exit_facts(self) -> ExitFacts | None: ...

    async def wait(self) -> ExitFacts: ...


class StdoutUntilExit(anyio.abc.ByteReceiveStream):
    """The product's stdout, ending at EOF or ``drain`` seconds after the product exited.

    ``receive()`` raises :class:`anyio.EndOfStream` at real EOF, or once the product has
    exited and ``drain`` seconds have passed since its exit was first observed without
    EOF. Bytes already in the pipe are still delivered within that window. Closing this
    stream leaves the underlying stdout to the process (released by its teardown).

    Attributes:
        ended_by_exit: Whether the stream ended because the drain window after the exit
            ran out (stdout still held open by something else), not at EOF.
    """

    def __init__(
        self, process: ExitingProcess, stdout: anyio.abc.ByteReceiveStream, drain: float
    ) -> None:
        self._process = process
        self._stdout = stdout
        self._drain = drain
        self._deadline: float | None = None
        self._ended = False
        self._closed = False
        self.ended_by_exit = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """The next bytes of stdout.

        Raises:
            anyio.EndOfStream: At EOF, or once the drain window after the exit is over.
            anyio.ClosedResourceError: After :meth:`aclose`.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        if self._ended:
            raise anyio.EndOfStream
        if self._deadline is None and self._process.exit_facts is not None:
            self._deadline = anyio.current_time() + self._drain
        if self._deadline is None:
            received: list[bytes | None] = []
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    try:
                        received.append(await self._receive_or_end(max_bytes))
                    except anyio.EndOfStream:
                        received.append(None)
                    tg.cancel_scope.cancel()

                async def exited() -> None:
                    await self._process.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(read)
                tg.start_soon(exited)
            if received:
                if received[0] is None:
                    raise anyio.EndOfStream
                return received[0]
            # The exit came first (the cancelled receive lost nothing): drain what is left.
            self._deadline = anyio.current_time() + self._drain
        with anyio.move_on_after(self._deadline - anyio.current_time()):
            return await self._receive_or_end(max_bytes)
        self._ended = True
        self.ended_by_exit = True
        raise anyio.EndOfStream

    async def _receive_or_end(self, max_bytes: int) -> bytes:
        try:
            return await self._stdout.receive(max_bytes)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended = True
            raise anyio.EndOfStream from None

    async def aclose(self) -> None:
        """Stop reading; the pipe itself belongs to the process."""
        self._closed = True
        await anyio.lowlevel.checkpoint()
