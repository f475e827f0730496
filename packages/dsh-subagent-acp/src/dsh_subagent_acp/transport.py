"""Newline-delimited JSON-RPC frames over a managed process's anyio pipes.

The ``acp`` library's own stdio transport wants asyncio ``StreamReader``/``StreamWriter``
objects and silently skips frames it cannot parse. This transport plugs into the
library's message-level ``Transport`` seam instead, reads the pipes that dsh-subprocess
owns, and treats a malformed frame as a protocol failure: the stream ends there and the
run fails with category ``malformed-frame`` (an agent whose stdout is not clean ACP
cannot be trusted to report its outcome).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["MAX_FRAME_BYTES", "NdjsonPipeTransport"]

MAX_FRAME_BYTES: Final = 50 * 1024 * 1024
"""Largest accepted frame (the library's own stdio default)."""


def _is_json_rpc_frame(message: object) -> bool:
    if not isinstance(message, dict):
        return False
    if "method" in message:
        return isinstance(message["method"], str) and (
            "params" not in message
            or message["params"] is None
            or isinstance(message["params"], dict)
        )
    return "id" in message and ("result" in message or "error" in message)


class NdjsonPipeTransport:
    """An ``acp`` message transport over one process's stdin/stdout pipes.

    Attributes:
        ended: Set once the agent's stdout ended (EOF, or a malformed frame).
        malformed: Whether the stream ended on a malformed or oversized frame.
    """

    def __init__(self, stdin: ByteSendStream, stdout: ByteReceiveStream) -> None:
        self._stdin = stdin
        self._stdout = BufferedByteReceiveStream(stdout)
        self._send_lock = anyio.Lock()
        self._closed = False
        self.ended = anyio.Event()
        self.malformed = False

    async def send(self, message: dict[str, Any]) -> None:
        """Write one frame; raises ``ConnectionError`` when the agent's stdin is gone."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        async with self._send_lock:
            if self._closed:
                raise ConnectionError("ACP transport closed")
            try:
                await self._stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ConnectionError("ACP agent stdin closed") from exc

    async def receive(self) -> dict[str, Any] | None:
        """Read the next frame; ``None`` at end of stream or after a malformed frame."""
        if self.ended.is_set():
            return None
        while True:
            try:
                line = await self._stdout.receive_until(b"\n", MAX_FRAME_BYTES)
            except anyio.DelimiterNotFound:
                self._end(malformed=True)
                return None
            except anyio.IncompleteRead:
                # EOF in the middle of a frame: whatever arrived is not a whole message.
                self._end(malformed=bool(self._stdout.buffer.strip()))
                return None
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._end(malformed=False)
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self._end(malformed=True)
                return None
            if not _is_json_rpc_frame(message):
                self._end(malformed=True)
                return None
            return message  # type: ignore[no-any-return]

    def _end(self, *, malformed: bool) -> None:
        self.malformed = self.malformed or malformed
        self.ended.set()

    async def close(self) -> None:
        """Close the agent's stdin (the agent sees EOF); idempotent."""
        async with self._send_lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._stdin.aclose()
