"""The Chat Completions and Gemini loopback fixtures: wire shapes, exact usage, scripting."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import pytest
from dsh_contract_tests import LoopbackDirectiveRoute
from dsh_contract_tests.fixtures.chat_completions import (
    ChatCompletionsFixture,
    message_texts,
)
from dsh_contract_tests.fixtures.gemini import GeminiFixture, content_texts, request_model
from dsh_contract_tests.fixtures.loopback import (
    Behaviour,
    Hold,
    HttpError,
    LoopbackFixture,
    TextAnswer,
    TokenUsage,
    ToolCall,
)

CHAT = "/v1/chat/completions"
GEMINI_STREAM = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
GEMINI_ONCE = "/v1beta/models/gemini-2.5-pro:generateContent"


def _post(fixture: LoopbackFixture, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fixture.port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"authorization": "Bearer sekrit", "x-goog-api-key": "g-sekrit"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _data(raw: bytes) -> list[Any]:
    lines = [line.removeprefix("data: ") for line in raw.decode().splitlines()]
    return [json.loads(line) for line in lines if line and line != "[DONE]"]


def _chat(content: str, *, stream: bool = True, tools: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "model": "m-1",
        "stream": stream,
        "messages": [{"role": "user", "content": [{"type": "text", "text": content}]}],
        "tools": [{"type": "function", "function": {"name": n, "parameters": {}}} for n in tools],
    }


def test_chat_streams_the_answer_and_reports_usage_exactly() -> None:
    usage = TokenUsage(120, 9, cached_tokens=100, reasoning_tokens=4)
    with ChatCompletionsFixture([TextAnswer("DONE", usage)]) as fixture:
        status, raw = _post(fixture, CHAT, _chat("the task"))
        (request,) = fixture.model_requests()
    assert status == 200
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = _data(raw)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "DONE"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 9,
        "total_tokens": 129,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 4},
    }
    assert request.bearer_token == "sekrit"
    assert message_texts(request) == ["the task"]


def test_chat_calls_the_first_advertised_tool_and_answers_non_streamed() -> None:
    script: list[Behaviour] = [
        ToolCall((("run", {"cmd": "x"}), ("bash", {"command": "true"})), call_id="call_7"),
        TextAnswer("after"),
    ]
    with ChatCompletionsFixture(script) as fixture:
        _, raw = _post(fixture, CHAT, _chat("t", tools=("bash",)))
        status, once = _post(fixture, CHAT, _chat("t", stream=False))
    call = _data(raw)[0]["choices"][0]["delta"]["tool_calls"][0]
    assert (call["id"], call["function"]["name"]) == ("call_7", "bash")
    assert json.loads(call["function"]["arguments"]) == {"command": "true"}
    assert _data(raw)[1]["choices"][0]["finish_reason"] == "tool_calls"
    answer = json.loads(once)
    assert (status, answer["choices"][0]["message"]["content"]) == (200, "after")
    assert answer["usage"]["total_tokens"] == 11


def test_chat_refuses_an_unadvertised_tool_an_exhausted_script_and_other_paths() -> None:
    with ChatCompletionsFixture([ToolCall((("nope", {}),)), HttpError(429, "slow")]) as fixture:
        unadvertised = _post(fixture, CHAT, _chat("t", tools=("bash",)))
        limited = _post(fixture, CHAT, _chat("t"))
        exhausted = _post(fixture, CHAT, _chat("t"))
        other = _post(fixture, "/v1/models", {})
    assert unadvertised[0] == 500
    assert b"none of the fixture tool calls" in unadvertised[1]
    assert limited[0] == 429
    assert json.loads(limited[1])["error"]["message"] == "slow"
    assert exhausted[0] == 500
    assert b"fixture script exhausted" in exhausted[1]
    assert other[0] == 404
    assert len(fixture.requests) == 4
    assert len(fixture.model_requests()) == 3


def test_a_hold_waits_for_release_then_answers() -> None:
    with ChatCompletionsFixture([Hold(then=TextAnswer("late"))]) as fixture:
        got: list[tuple[int, bytes]] = []
        thread = threading.Thread(target=lambda: got.append(_post(fixture, CHAT, _chat("t"))))
        thread.start()
        fixture.wait_for_hold(10)
        assert fixture.holding == 1
        assert not got
        fixture.release()
        thread.join(10)
    assert got
    assert "late" in got[0][1].decode()


def test_gemini_streams_and_answers_with_exact_usage_metadata() -> None:
    usage = TokenUsage(200, 30, cached_tokens=50, reasoning_tokens=10)
    body = {"contents": [{"role": "user", "parts": [{"text": "the task"}]}]}
    with GeminiFixture([TextAnswer("DONE", usage), TextAnswer("again")]) as fixture:
        status, raw = _post(fixture, GEMINI_STREAM, body)
        _, once = _post(fixture, GEMINI_ONCE, body)
        requests = fixture.model_requests()
    (event,) = _data(raw)
    assert status == 200
    assert raw.endswith(b"\r\n\r\n")
    assert event["candidates"][0]["content"]["parts"] == [{"text": "DONE"}]
    assert event["candidates"][0]["finishReason"] == "STOP"
    assert event["usageMetadata"] == {
        "promptTokenCount": 200,
        "cachedContentTokenCount": 50,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 10,
        "totalTokenCount": 230,
    }
    assert json.loads(once)["candidates"][0]["content"]["parts"] == [{"text": "again"}]
    assert [request_model(r) for r in requests] == ["gemini-2.5-pro", "gemini-2.5-pro"]
    assert requests[0].headers["x-goog-api-key"] == "g-sekrit"
    assert content_texts(requests[0]) == ["the task"]


def test_gemini_calls_a_declared_function() -> None:
    body = {
        "contents": [],
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
    }
    with GeminiFixture([ToolCall((("run_shell_command", {"command": "true"}),))]) as fixture:
        _, raw = _post(fixture, GEMINI_STREAM, body)
    (event,) = _data(raw)
    part = event["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"]["name"] == "run_shell_command"
    assert part["functionCall"]["args"] == {"command": "true"}


@pytest.mark.parametrize("fixture_type", [ChatCompletionsFixture, GeminiFixture])
def test_the_directive_route_completes_fails_and_holds(
    fixture_type: type[ChatCompletionsFixture] | type[GeminiFixture],
) -> None:
    route = LoopbackDirectiveRoute()
    route.error_text = "planted raw error"
    path = CHAT if fixture_type is ChatCompletionsFixture else GEMINI_STREAM

    def body(text: str) -> dict[str, Any]:
        return {"contents": [{"parts": [{"text": text}]}], "messages": [{"content": text}]}

    with fixture_type(route=route) as fixture:
        _, done = _post(fixture, path, body("dsh-contract/1 complete T-0123456789ab"))
        failed = _post(fixture, path, body("dsh-contract/1 fail T-0123456789ab"))
        _, plain = _post(fixture, path, body("no directive"))
        thread = threading.Thread(
            target=_post, args=(fixture, path, body("dsh-contract/1 hold T-0123456789ab"))
        )
        thread.start()
        fixture.wait_for_hold(10)
    thread.join(10)
    assert "T-0123456789ab" in done.decode()
    assert "ok" in plain.decode()
    assert failed[0] == 500
    assert b"planted raw error" in failed[1]


def test_token_usage_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="negative"):
        TokenUsage(-1, 0)
    with pytest.raises(ValueError, match="cached_tokens"):
        TokenUsage(1, 1, cached_tokens=2)
    with pytest.raises(ValueError, match="reasoning_tokens"):
        TokenUsage(1, 1, reasoning_tokens=2)
