"""Newline-delimited JSON-RPC over the app-server's stdio, pull-based.

One consumer reads frames with :meth:`JsonRpcLines.next_frame`; no background reader
task exists, so the connection can move from the task that started the app-server to
the run's driver task. Writes are serialised by a lock (the driver answers server
requests while disposal may send ``turn/interrupt``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from dsh_subagent_codex.errors import CodexTransportClosed

__all__ = ["Frame", "JsonRpcLines", "new_request_id"]

_READ_CHUNK = 65536


def new_request_id() -> str:
    """A fresh request id, ``req_<32 hex>``."""
    return f"req_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded incoming message.

    Exactly one of three kinds: a response (``id`` set, no ``method``), a server request
    (``id`` and ``method``) or a notification (``method`` only). ``params`` is the raw
    params value; shapes are validated by the consumer.
    """

    id: Any
    method: str | None
    params: Any
    result: Any
    error: Any
    has_id: bool

    @property
    def is_response(self) -> bool:
        """A response to one of our requests."""
        return self.method is None and self.has_id

    @property
    def is_request(self) -> bool:
        """A request from the server that must be answered."""
        return self.method is not None and self.has_id

    @property
    def is_notification(self) -> bool:
        """A notification from the server."""
        return self.method is not None and not self.has_id


def _decode(line: bytes) -> Frame | None:
    text = line.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None  # the server logs to stderr; a stray unparseable line is not a frame
    if not isinstance(value, dict):
        return None
    method = value.get("method")
    if method is not None and not isinstance(method, str):
        return None
    return Frame(
        id=value.get("id"),
        method=method,
        params=value.get("params"),
        result=value.get("result"),
        error=value.get("error"),
        has_id="id" in value and value.get("id") is not None,
    )


class JsonRpcLines:
    """A JSON-RPC 2.0 line connection over a byte stream pair."""

    def __init__(self, send: ByteSendStream, receive: ByteReceiveStream) -> None:
        self._send = send
        self._receive = receive
        self._buffer = bytearray()
        self._write_lock = anyio.Lock()
        self._eof = False
        self._closed = False

    @property
    def eof(self) -> bool:
        """Whether the server's output has ended."""
        return self._eof

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def next_frame(self) -> Frame:
        """Read the next decodable frame.

        Raises:
            CodexTransportClosed: The server's output ended or the connection was closed.
        """
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                frame = _decode(line)
                if frame is not None:
                    return frame
                continue
            if self._eof or self._closed:
                raise CodexTransportClosed("JSON-RPC input closed")
            try:
                chunk = await self._receive.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                if self._buffer:  # a last frame without its newline still counts
                    self._buffer.extend(b"\n")
                continue
            self._buffer.extend(chunk)

    def take_buffered(self) -> list[Frame]:
        """Decode and remove the complete frames already received, without reading more."""
        frames: list[Frame] = []
        while (newline := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:newline])
            del self._buffer[: newline + 1]
            frame = _decode(line)
            if frame is not None:
                frames.append(frame)
        return frames

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise CodexTransportClosed("JSON-RPC transport closed")
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        async with self._write_lock:
            try:
                await self._send.send(data)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                raise CodexTransportClosed("JSON-RPC output closed") from exc

    async def send_request(self, method: str, params: Any) -> str:
        """Send a request and return its id (responses are read by the consumer)."""
        request_id = new_request_id()
        await self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; ``params=None`` leaves the key out entirely."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    async def respond(self, request_id: Any, result: Any) -> None:
        """Answer a server request with ``result``."""
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def respond_error(self, request_id: Any, code: int, message: str) -> None:
        """Answer a server request with a JSON-RPC error."""
        await self._write(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        )

    async def close(self) -> None:
        """Stop reading and end our output (stdin EOF). Idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        # No write lock: a write blocked on a full pipe must not stall disposal; closing
        # makes that write fail instead. An already broken pipe means the app-server is
        # gone and EOF is moot.
        with contextlib.suppress(Exception):
            await self._send.aclose()
