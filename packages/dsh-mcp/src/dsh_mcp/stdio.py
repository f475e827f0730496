"""The stdio transport: newline-delimited JSON-RPC on this process's stdin and stdout.

Unlike a worker thread blocked in ``readline()``, every wait here is cancellable: the
server can stop on SIGTERM while the client still holds stdin open, and it notices at
once when the client closes stdin or dies (end of file). While serving, file
descriptors 0 and 1 point at the null device and at stderr, so nothing a library or a
child process writes can corrupt the protocol stream; the wire is served from private
duplicates that children do not inherit.

A line that is not a JSON-RPC message gets the JSON-RPC 2.0 error response (-32700 parse
error, -32600 invalid request) and the server goes on. A message longer than
:data:`MAX_MESSAGE_BYTES` is dropped (and reported to the session as a transport error)
instead of growing a buffer without bound.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["MAX_MESSAGE_BYTES", "stdio_transport"]

MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The longest inbound JSON-RPC line kept; longer ones are dropped."""

_READ_CHUNK: Final = 65536
_WRITE_CHUNK: Final = 4096  # at most PIPE_BUF: a pipe reported writable takes it whole


class MessageTooLongError(ValueError):
    """An inbound line exceeded :data:`MAX_MESSAGE_BYTES` and was dropped."""


def _is_regular_file(fd: int) -> bool:
    # A regular file (``dsh mcp p.toml < requests.jsonl``) cannot be polled, nor does it
    # ever block.
    return stat.S_ISREG(os.fstat(fd).st_mode)


async def _ready(fd: int, *, regular: bool, write: bool) -> None:
    if regular:
        await anyio.lowlevel.checkpoint()
    elif write:
        await anyio.wait_writable(fd)
    else:
        await anyio.wait_readable(fd)


def _too_long() -> MessageTooLongError:
    return MessageTooLongError(f"inbound message longer than {MAX_MESSAGE_BYTES} bytes dropped")


def _id_of(value: dict[str, object]) -> types.RequestId | None:
    """The request's id when it is one JSON-RPC allows here (a string or an integer)."""
    request_id = value.get("id")
    if isinstance(request_id, str) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    ):
        return request_id
    return None


def _error_reply(code: int, message: str, request_id: types.RequestId | None) -> SessionMessage:
    error = types.ErrorData(code=code, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _parse(line: bytes) -> SessionMessage | _Reply | None:
    """A message, or what to answer a line that is not one (``None``: nothing to answer).

    JSON-RPC 2.0: a line that is not JSON (bad UTF-8 included) is a parse error (-32700,
    id null); JSON that is not a valid request, notification or response is an invalid
    request (-32600), with the line's id when it has a readable one (a string or an
    integer), else null. A malformed *response* gets no answer: JSON-RPC never answers
    a response. The returned exception is the error reply, wrapped for the reader.
    """
    try:
        value = json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        return _Reply(_error_reply(types.PARSE_ERROR, "Parse error: not valid JSON", None))
    # An id that is present but not a string or an integer (an object, true, null) makes
    # no valid message, though the models would read the line as a notification.
    if not isinstance(value, dict) or "id" not in value or _id_of(value) is not None:
        try:
            parsed = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
            return SessionMessage(parsed)
        except ValidationError:
            pass
    if not isinstance(value, dict):
        reply = _error_reply(types.INVALID_REQUEST, "Invalid Request: not a JSON object", None)
        return _Reply(reply)
    if "method" not in value and ("result" in value or "error" in value):
        return None
    message = "Invalid Request: not a JSON-RPC 2.0 request or notification"
    return _Reply(_error_reply(types.INVALID_REQUEST, message, _id_of(value)))


class _Reply(Exception):
    """A line that is not a message; :attr:`reply` is the error response it gets."""

    def __init__(self, reply: SessionMessage) -> None:
        super().__init__("invalid JSON-RPC line")
        self.reply = reply


async def _read_lines(
    fd: int,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    replies: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Hand every message to the session; answer every line that is not one.

    ``replies`` is a clone of the session's write stream: an error response goes out
    on the wire between the session's own messages, each message whole.
    """
    regular = _is_regular_file(fd)
    buffer = bytearray()
    discarding = False

    async def deliver(line: bytes) -> None:
        parsed = _parse(line)
        if isinstance(parsed, _Reply):
            await replies.send(parsed.reply)
        elif parsed is not None:
            await send.send(parsed)

    async with send, replies:
        while True:
            await _ready(fd, regular=regular, write=False)
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                break  # the wire is unusable: same as end of file
            if not chunk:
                break
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                piece, start = chunk[start:end], end + 1
                if discarding:
                    discarding = False
                    continue
                buffer += piece
                line = bytes(buffer)
                buffer.clear()
                if len(line) > MAX_MESSAGE_BYTES:
                    await send.send(_too_long())
                elif line.strip():
                    await deliver(line)
            if not discarding:
                buffer += chunk[start:]
                if len(buffer) > MAX_MESSAGE_BYTES:
                    buffer.clear()
                    discarding = True  # until the end of this line
                    await send.send(_too_long())
        if buffer.strip() and not discarding:
            await deliver(bytes(buffer))


async def _write_messages(fd: int, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    regular = _is_regular_file(fd)
    async with receive:
        async for message in receive:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            view = memoryview(data.encode("utf-8"))
            while view:
                await _ready(fd, regular=regular, write=True)
                try:
                    written = os.write(fd, view[:_WRITE_CHUNK])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    return  # the client is gone (EPIPE); its end of file stops the server
                view = view[written:]


def _claim_standard_streams() -> tuple[int, int, Callable[[], None]]:
    """Private duplicates of fds 0 and 1; 0 then reads the null device and 1 is stderr."""
    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)

    return wire_in, wire_out, restore


_Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[_Streams]:
    """Serve the wire on this process's stdin/stdout; yields ``(read, write)`` streams.

    The read stream ends when the client closes stdin (or exits); both descriptors are
    restored on exit.
    """
    wire_in, wire_out, restore = _claim_standard_streams()
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_read_lines, wire_in, read_send, write_send.clone())
            group.start_soon(_write_messages, wire_out, write_receive)
            try:
                yield read_receive, write_send
            finally:
                group.cancel_scope.cancel()
    finally:
        restore()
