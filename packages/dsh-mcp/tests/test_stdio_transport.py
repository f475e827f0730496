"""The stdio transport's line reader and writer over a real pipe (fd 0 and 1 untouched)."""

from __future__ import annotations

import os

import anyio
import mcp_types as types
import pytest
from dsh_mcp import stdio
from mcp.shared.message import SessionMessage

pytestmark = pytest.mark.anyio

PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


async def _read_all(chunks: list[bytes]) -> list[SessionMessage | Exception]:
    read_fd, write_fd = os.pipe()
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](100)
    got: list[SessionMessage | Exception] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(stdio._read_lines, read_fd, send)
            for chunk in chunks:
                os.write(write_fd, chunk)
            os.close(write_fd)  # end of file: the reader ends and closes its stream
            write_fd = -1
            async with receive:
                got.extend([item async for item in receive])
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    return got


async def test_lines_split_across_writes_blank_lines_and_a_last_unterminated_line() -> None:
    got = await _read_all([PING[:10], PING[10:] + b"\n\n  \n", PING])
    assert [type(item) for item in got] == [SessionMessage, SessionMessage]
    first = got[0]
    assert isinstance(first, SessionMessage)
    assert isinstance(first.message, types.JSONRPCRequest)
    assert first.message.method == "ping"


async def test_a_bad_line_is_reported_and_the_next_one_still_parses() -> None:
    got = await _read_all([b"not json\n", PING + b"\n"])
    assert isinstance(got[0], Exception)
    assert isinstance(got[1], SessionMessage)


@pytest.mark.parametrize("read_chunk", [16, 65536], ids=["across-reads", "within-one-read"])
async def test_an_over_long_line_is_dropped_not_buffered(
    monkeypatch: pytest.MonkeyPatch, read_chunk: int
) -> None:
    monkeypatch.setattr(stdio, "MAX_MESSAGE_BYTES", 64)
    monkeypatch.setattr(stdio, "_READ_CHUNK", read_chunk)
    got = await _read_all([b"x" * 50, b"y" * 50, b"z" * 50 + b"\n", PING + b"\n"])
    assert len(got) == 2
    assert isinstance(got[0], stdio.MessageTooLongError)
    assert isinstance(got[1], SessionMessage)  # the stream goes on after the dropped line


async def test_messages_are_written_one_per_line_and_a_gone_reader_ends_the_writer() -> None:
    read_fd, write_fd = os.pipe()
    send, receive = anyio.create_memory_object_stream[SessionMessage](0)
    message = SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=7, method="ping"))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(stdio._write_messages, write_fd, receive)
            async with send:
                await send.send(message)
                line = await anyio.to_thread.run_sync(os.read, read_fd, 4096)
                os.close(read_fd)  # the client is gone: the next write fails with EPIPE
                read_fd = -1
                await send.send(message)
            # The writer returned instead of raising; leaving the group proves it ended.
    finally:
        os.close(write_fd)
        if read_fd >= 0:
            os.close(read_fd)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert b'"id":7' in line
