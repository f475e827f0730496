"""The stdio transport's line reader and writer over a real pipe (fd 0 and 1 untouched),
and the real ``dsh mcp`` answering lines that are not JSON-RPC messages."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import anyio
import mcp_types as types
import pytest
from dsh_mcp import stdio
from mcp.shared.message import SessionMessage
from mcp_sandbox import DSH, Sandbox

pytestmark = pytest.mark.anyio

PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


async def _read_all(chunks: list[bytes]) -> list[SessionMessage | Exception]:
    got, _ = await _read_and_answer(chunks)
    return got


async def _read_and_answer(
    chunks: list[bytes],
) -> tuple[list[SessionMessage | Exception], list[dict[str, object]]]:
    """What the reader hands the session, and the error responses it writes itself."""
    read_fd, write_fd = os.pipe()
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](100)
    reply_send, reply_receive = anyio.create_memory_object_stream[SessionMessage](100)
    got: list[SessionMessage | Exception] = []
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(stdio._read_lines, read_fd, send, reply_send)
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
    async with reply_receive:
        replies = [
            json.loads(item.message.model_dump_json(by_alias=True, exclude_unset=True))
            async for item in reply_receive
        ]
    return got, replies


async def test_lines_split_across_writes_blank_lines_and_a_last_unterminated_line() -> None:
    got = await _read_all([PING[:10], PING[10:] + b"\n\n  \n", PING])
    assert [type(item) for item in got] == [SessionMessage, SessionMessage]
    first = got[0]
    assert isinstance(first, SessionMessage)
    assert isinstance(first.message, types.JSONRPCRequest)
    assert first.message.method == "ping"


async def test_lines_that_are_not_json_rpc_get_the_json_rpc_error_responses() -> None:
    got, replies = await _read_and_answer(
        [
            b"not json\n",
            b'{"jsonrpc": "2.0", "id": 3, "method": "ping", \xff}\n',  # bad UTF-8
            b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}\n',  # wrong version, an id
            b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"}\n',
            b'{"jsonrpc": "2.0", "id": "s-5", "method": 7}\n',
            b'{"jsonrpc": "2.0", "id": true, "method": "ping"}\n',
            b"[1, 2]\n",
            b'{"jsonrpc": "2.0", "id": 9, "result": "not an object"}\n',  # a response
            PING + b"\n",
        ]
    )
    parse = {"code": -32700, "message": "Parse error: not valid JSON"}
    invalid = {
        "code": -32600,
        "message": "Invalid Request: not a JSON-RPC 2.0 request or notification",
    }
    not_object = {"code": -32600, "message": "Invalid Request: not a JSON object"}
    assert replies == [
        {"jsonrpc": "2.0", "id": None, "error": parse},
        {"jsonrpc": "2.0", "id": None, "error": parse},
        {"jsonrpc": "2.0", "id": 4, "error": invalid},
        {"jsonrpc": "2.0", "id": None, "error": invalid},
        {"jsonrpc": "2.0", "id": "s-5", "error": invalid},
        {"jsonrpc": "2.0", "id": None, "error": invalid},
        {"jsonrpc": "2.0", "id": None, "error": not_object},
    ]  # and none for the malformed response: JSON-RPC never answers a response
    (ping,) = got  # the next good line still reaches the session
    assert isinstance(ping, SessionMessage)
    assert isinstance(ping.message, types.JSONRPCRequest)


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


def test_the_real_server_answers_bad_lines_with_json_rpc_errors_and_stays_up(
    box: Sandbox,
) -> None:
    """Raw lines on the stdio of the real ``dsh mcp``: each bad one gets its error
    response, and the session goes on (a ping after them is answered)."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    lines = [
        json.dumps(initialize).encode(),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b"garbage",
        b'{"jsonrpc": "2.0", "id": 2, \xff}',
        b'{"jsonrpc": "1.0", "id": 3, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"}',
        b'{"jsonrpc": "2.0", "id": 99, "method": "ping"}',
    ]
    server = subprocess.Popen(  # noqa: TID251 - the dsh command itself, not a product
        [str(DSH), "mcp", str(box.profile())],
        env=box.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        answers: list[dict[str, Any]] = []
        while not answers or answers[-1].get("id") != 99:
            raw = server.stdout.readline()
            assert raw, f"the server closed its stdout after {answers}"
            answers.append(json.loads(raw))
        server.stdin.close()
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
    assert answers[0]["id"] == 1
    assert "result" in answers[0]
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers[1:]] == [
        (None, -32700),
        (None, -32700),
        (3, -32600),
        (None, -32600),
        (99, None),
    ]
    assert answers[-1]["result"] == {}
