"""The ``acp`` library's message transport over one run's product wire.

The library's own stdio transport wants asyncio ``StreamReader``/``StreamWriter`` objects,
holds lines of up to 50 MiB and silently skips frames it cannot parse. This transport
plugs into the library's message-level ``Transport`` seam instead and reads the runtime's
bounded line reader (:attr:`dsh_subagent.ProductChild.lines`), so a run has exactly one
stdout buffer, bounded by :data:`MAX_FRAME_BYTES`.

A line that is not one JSON-RPC frame ends the stream (category ``malformed-frame``): an
agent whose stdout is not clean ACP cannot be trusted to report its outcome. A line
longer than the bound ends it too (category ``line-too-long``).
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeGuard

import anyio
from dsh_subagent import LineTooLongError, MalformedLineError, ProductChild

__all__ = ["MAX_FRAME_BYTES", "LineTransport", "WireFault"]

MAX_FRAME_BYTES: Final = 16 << 20
"""16 MiB: the longest ACP frame accepted.

Frames can embed resources and images as base64 (an agent message, a tool call's diff),
so the bound sits well above the runtime's 8 MiB default, and far below a memory problem
(the library's own stdio default was 50 MiB).
"""

WireFault = Literal["malformed-frame", "line-too-long"]
"""Why the agent's stdout was abandoned before its end."""


def _is_json_rpc_frame(message: object) -> TypeGuard[dict[str, Any]]:
    if not isinstance(message, dict):
        return False
    if "method" in message:
        return isinstance(message["method"], str) and (
            "params" not in message
            or message["params"] is None
            or isinstance(message["params"], dict)
        )
    return "id" in message and ("result" in message or "error" in message)


class LineTransport:
    """An ``acp`` message transport over one run's :class:`~dsh_subagent.ProductChild`.

    Attributes:
        ended: Set once the agent's stdout ended (EOF, the agent's exit, or a fault).
        fault: Why the stream was abandoned early, ``None`` at a plain end.
    """

    def __init__(self, child: ProductChild) -> None:
        self._child = child
        self._send_lock = anyio.Lock()
        self.ended = anyio.Event()
        self.fault: WireFault | None = None
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        """Write one frame; raises ``ConnectionError`` when the agent's stdin is gone."""
        async with self._send_lock:
            try:
                await self._child.send_json(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise ConnectionError("ACP agent stdin closed") from exc

    async def receive(self) -> dict[str, Any] | None:
        """The next frame; ``None`` at the end of stdout, after a fault or once closed."""
        if self.ended.is_set() or self.is_closed():
            return None
        try:
            message = await self._child.lines.receive_json()
        except anyio.EndOfStream:
            return self._end(None)
        except LineTooLongError:
            return self._end("line-too-long")
        except MalformedLineError:  # not JSON, or a cut last line at EOF
            return self._end("malformed-frame")
        if not _is_json_rpc_frame(message):  # a JSON value that is not a frame
            return self._end("malformed-frame")
        if self.is_closed():
            # The read completed as the library closed the connection (its cancellation
            # of this read can be absorbed by a task group racing its own cancel): a
            # frame handed over now would be dispatched by a closed connection, whose
            # handler coroutine is then never awaited. The library reads None as the end.
            return None
        return message

    def is_closed(self) -> bool:
        """Whether the library closed this transport (no frame is handed over after)."""
        return self._closed

    def _end(self, fault: WireFault | None) -> dict[str, Any] | None:
        # Returns None: the library's end-of-stream signal.
        self.fault = fault
        self.ended.set()
        return None

    async def close(self) -> None:
        """No frame is handed over from now on; the runtime closes stdin and ends the
        process tree. The library calls this first when its connection closes."""
        self._closed = True
