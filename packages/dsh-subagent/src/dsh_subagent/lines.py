"""The one bounded line reader of every line protocol a product speaks on its stdout.

A product is not trusted to end its lines: a reader that grows its buffer until a newline
arrives lets a hostile or broken product exhaust the host's memory. :class:`LineReader`
holds at most ``max_line_bytes`` (plus one read chunk) of an unfinished line and fails
the line as soon as it is longer. What to do with a complete line that is not valid JSON
is each provider's policy (:data:`MalformedLinePolicy`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Final, Literal

import anyio
import anyio.abc

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "LineReader",
    "LineTooLongError",
    "MalformedLineError",
    "MalformedLinePolicy",
]

DEFAULT_MAX_LINE_BYTES: Final = 8 << 20
"""8 MiB: far above any real protocol message, far below a memory problem."""

_CHUNK: Final = 65536

MalformedLinePolicy = Literal["skip", "fail"]
"""``"skip"``: log and ignore a line that is not one JSON value (products that print
banners on stdout); ``"fail"``: the run fails with category ``malformed-output``."""

_log = logging.getLogger("dsh_subagent.lines")

_SKIPPED: Final = object()  # a blank or skipped line (``None`` is the JSON value null)


class LineTooLongError(Exception):
    """The product wrote more than ``max_line_bytes`` without a newline."""


class MalformedLineError(Exception):
    """A complete line was not one JSON value under the ``"fail"`` policy."""


class LineReader:
    """Newline-delimited lines of a byte stream, each at most ``max_line_bytes``.

    Args:
        stream: The product's stdout (e.g. ``ManagedProcess.stdout_until_exit(...)``).
        max_line_bytes: Longest line accepted, newline excluded.
        malformed: What :meth:`receive_json` does with a line that is not JSON.

    Lines are returned without their ``\\n`` (and without a trailing ``\\r``). A final
    line without a newline is returned at end of stream. At end of stream
    :meth:`receive` raises :class:`anyio.EndOfStream`.
    """

    def __init__(
        self,
        stream: anyio.abc.ByteReceiveStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        malformed: MalformedLinePolicy = "fail",
    ) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self._stream = stream
        self._max = max_line_bytes
        self._malformed: MalformedLinePolicy = malformed
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no newline
        self._eof = False
        self.activity_listener: Callable[[], None] | None = None
        """Called each time the stream delivers bytes (the runtime's idle timeout)."""

    @property
    def eof(self) -> bool:
        """Whether the stream has ended (every line before it was delivered)."""
        return self._eof and not self._buffer

    async def receive(self) -> bytes:
        """The next line.

        Raises:
            anyio.EndOfStream: The stream ended and no bytes are left.
            LineTooLongError: The line exceeds ``max_line_bytes``; the reader is spent.
        """
        while True:
            line = self._buffered_line()
            if line is not None:
                return line
            try:
                chunk = await self._stream.receive(_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                continue
            self._buffer += chunk
            if self.activity_listener is not None:
                self.activity_listener()

    def receive_nowait(self) -> bytes:
        """The next line if it was already received, without reading (or awaiting) more.

        For a protocol that must still handle what arrived together with a final message
        (e.g. a request written in the same chunk as a terminal notification).

        Raises:
            anyio.WouldBlock: No complete line is buffered.
            anyio.EndOfStream: The stream ended and no bytes are left.
            LineTooLongError: The line exceeds ``max_line_bytes``; the reader is spent.
        """
        line = self._buffered_line()
        if line is None:
            raise anyio.WouldBlock
        return line

    def _buffered_line(self) -> bytes | None:
        """The next complete line in the buffer (or the last one at EOF), else ``None``."""
        newline = self._buffer.find(b"\n", self._scanned)
        if newline >= 0:
            if newline > self._max:
                raise LineTooLongError(f"line longer than {self._max} bytes")
            line = bytes(self._buffer[:newline])
            del self._buffer[: newline + 1]  # O(1) from the front of a bytearray
            self._scanned = 0
            return line.removesuffix(b"\r")
        if len(self._buffer) > self._max:
            raise LineTooLongError(f"line longer than {self._max} bytes")
        self._scanned = len(self._buffer)
        if not self._eof:
            return None
        if not self._buffer:
            raise anyio.EndOfStream
        line = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        return line.removesuffix(b"\r")

    async def receive_json(self) -> object:
        """The next line that is one JSON value, under the malformed-line policy.

        Blank lines are skipped under either policy.

        Raises:
            anyio.EndOfStream: The stream ended.
            LineTooLongError: A line exceeded ``max_line_bytes``.
            MalformedLineError: A line was not JSON and the policy is ``"fail"``.
        """
        while True:
            value = self._decode(await self.receive())
            if value is not _SKIPPED:
                return value

    def receive_json_nowait(self) -> object:
        """:meth:`receive_json` over the lines already received (see :meth:`receive_nowait`).

        Raises:
            anyio.WouldBlock: No complete JSON line is buffered.
            anyio.EndOfStream: The stream ended.
            LineTooLongError: A line exceeded ``max_line_bytes``.
            MalformedLineError: A line was not JSON and the policy is ``"fail"``.
        """
        while True:
            value = self._decode(self.receive_nowait())
            if value is not _SKIPPED:
                return value

    def _decode(self, line: bytes) -> object:
        if not line.strip():
            return _SKIPPED
        try:
            return json.loads(line)
        except ValueError:
            if self._malformed == "fail":
                raise MalformedLineError("product wrote a line that is not JSON") from None
            # The line is product text: its length only, never its content.
            _log.debug("skipped a non-JSON stdout line of %d bytes", len(line))
            return _SKIPPED

    # An explicit iterator, not an async generator: an abandoned generator is finalised
    # outside any task on trio.
    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
