"""The Messages fixture scripts several blocks per turn, exact usage and a mid-stream stall."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest
from dsh_contract_tests.fixtures.messages import (
    MessagesFixture,
    StallMidStream,
    TextAnswer,
    TokenUsage,
    ToolUse,
    Turn,
)


def _post(fixture: MessagesFixture) -> bytes:
    conn = http.client.HTTPConnection(urlsplit(fixture.base_url).netloc, timeout=10)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps({"model": "m"}).encode())
        return conn.getresponse().read()
    finally:
        conn.close()


def _events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in data.decode().split("\n\n"):
        if frame.strip():
            lines = dict(line.split(": ", 1) for line in frame.splitlines())
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_turn_streams_its_blocks_in_order_with_its_exact_usage() -> None:
    usage = TokenUsage(
        input_tokens=101,
        output_tokens=23,
        cache_read_input_tokens=45,
        cache_creation_input_tokens=6,
        thinking_tokens=4,
    )
    turn = Turn(
        (
            TextAnswer("Looking first."),
            ToolUse("Bash", {"command": "ls"}, "toolu_a"),
            ToolUse("Read", {"file_path": "/x"}, "toolu_b"),
        ),
        usage=usage,
    )
    with MessagesFixture([turn]) as fixture:
        events = _events(_post(fixture))
    assert [name for name, _ in events] == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_stop"] * 3,
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"] == {
        "input_tokens": 101,
        "output_tokens": 0,
        "cache_creation_input_tokens": 6,
        "cache_read_input_tokens": 45,
    }
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert [(block["type"], block.get("id")) for block in starts] == [
        ("text", None),
        ("tool_use", "toolu_a"),
        ("tool_use", "toolu_b"),
    ]
    indices = [data["index"] for name, data in events if name.startswith("content_block")]
    assert indices == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 23, "output_tokens_details": {"thinking_tokens": 4}},
    }


def test_a_text_only_turn_ends_the_turn() -> None:
    with MessagesFixture([Turn((TextAnswer("a"), TextAnswer("b")))]) as fixture:
        events = _events(_post(fixture))
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert deltas == ["a", "b"]


def test_single_answers_take_scripted_usage_and_keep_the_old_defaults() -> None:
    scripted = TokenUsage(input_tokens=1000, output_tokens=50, cache_read_input_tokens=10)
    with MessagesFixture(
        [ToolUse("Bash", {"command": "true"}, usage=scripted), TextAnswer("plain")]
    ) as fixture:
        tool = _events(_post(fixture))
        plain = _events(_post(fixture))
    assert tool[0][1]["message"]["usage"]["input_tokens"] == 1000
    assert tool[0][1]["message"]["usage"]["cache_read_input_tokens"] == 10
    assert tool[-2][1]["usage"] == {"output_tokens": 50}
    assert plain[0][1]["message"]["usage"]["input_tokens"] == 7
    assert plain[-2][1]["usage"] == {"output_tokens": 1}


def test_an_empty_turn_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        Turn(())


def test_a_stall_sends_the_start_of_an_answer_then_nothing_until_released() -> None:
    stall = StallMidStream("half an answ", usage=TokenUsage(input_tokens=9))
    with MessagesFixture([stall]) as fixture:
        host, port = urlsplit(fixture.base_url).netloc.split(":")
        received = bytearray()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            body = b'{"model": "m"}'
            sock.sendall(
                b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            while b"half an answ" not in received:  # the partial text arrives first
                received += sock.recv(65536)
            fixture.wait_for_holds(1, timeout=10)  # ... then the server goes silent
            assert fixture.holding == 1
            fixture.release()
            while chunk := sock.recv(65536):  # released: the connection just closes
                received += chunk
    head, _, stream = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    events = _events(stream)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 9
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "half an answ"}
