"""Newline-delimited JSON-RPC over the app-server's stdio, pull-based.

Frames are read through the run's bounded line reader (``child.lines``: at most the
provider's ``max_line_bytes`` per line, lines that are not JSON skipped); one consumer
reads them with :meth:`JsonRpcLines.next_frame`, so no background reader task exists.
Writes are serialised by a lock: ``interrupt()`` may write ``turn/interrupt`` while the
cancelled turn's own write is still being unwound.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from dsh_subagent import ProductChild

__all__ = ["Frame", "JsonRpcLines", "new_request_id"]


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


def _frame(value: object) -> Frame | None:
    """The frame a JSON value is, or ``None`` for a value that is no frame (skipped)."""
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
    """A JSON-RPC 2.0 line connection over one run's product process."""

    def __init__(self, child: ProductChild) -> None:
        self._child = child
        self._write_lock = anyio.Lock()

    async def next_frame(self) -> Frame:
        """Read the next frame; lines that are not frames are skipped.

        Raises:
            anyio.EndOfStream: The app-server's output ended (the runtime reports the
                product's exit).
            dsh_subagent.LineTooLongError: A line exceeded the provider's bound.
        """
        while True:
            frame = _frame(await self._child.receive_json())
            if frame is not None:
                return frame

    def take_buffered(self) -> list[Frame]:
        """Decode and remove the frames already received, without reading more."""
        frames: list[Frame] = []
        while True:
            try:
                value = self._child.lines.receive_json_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                return frames
            frame = _frame(value)
            if frame is not None:
                frames.append(frame)

    async def _write(self, message: dict[str, Any]) -> None:
        async with self._write_lock:
            await self._child.send_json(message)

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
