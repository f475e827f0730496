"""The loopback Messages fixture speaks Anthropic SSE and records what it received."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dsh_contract_tests.fixtures.messages import (
    DEFAULT_FAKE_API_KEY,
    Behaviour,
    Hold,
    HttpError,
    MessagesFixture,
    RecordedRequest,
    Route,
    TextAnswer,
    ToolUse,
    keyless_claude_home,
    task_texts,
)


def _request(
    fixture: MessagesFixture,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    netloc = urlsplit(fixture.base_url).netloc
    conn = http.client.HTTPConnection(netloc, timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def _events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in data.decode().split("\n\n"):
        if not frame.strip():
            continue
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_text_answer_streams_the_anthropic_sse_sequence_and_echoes_the_model() -> None:
    with MessagesFixture(default=TextAnswer("EXACT ANSWER")) as fixture:
        status, headers, data = _request(
            fixture, "POST", "/v1/messages?beta=true", {"model": "some-model", "messages": []}
        )
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = _events(data)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(payload["type"] == name for name, payload in events)
    assert events[0][1]["message"]["model"] == "some-model"
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "EXACT ANSWER"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"


def test_every_request_is_recorded_with_path_query_headers_and_body() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "T"}]}],
    }
    with MessagesFixture(default=TextAnswer("A")) as fixture:
        _request(fixture, "POST", "/v1/messages?beta=true", body, {"X-Api-Key": "k-1"})
        [recorded] = fixture.message_requests()
    assert recorded.method == "POST"
    assert recorded.path == "/v1/messages"
    assert recorded.query == "beta=true"
    assert recorded.headers["x-api-key"] == "k-1"
    assert recorded.body == body
    assert task_texts(recorded, "T") == ["T"]


def test_script_serves_tool_use_then_answer_then_default() -> None:
    script: list[Behaviour] = [ToolUse("Bash", {"command": "echo hi"}), TextAnswer("after tool")]
    with MessagesFixture(script, default=HttpError(503)) as fixture:
        _, _, first = _request(fixture, "POST", "/v1/messages", {"model": "m"})
        _, _, second = _request(fixture, "POST", "/v1/messages", {"model": "m"})
        third_status, _, third = _request(fixture, "POST", "/v1/messages", {"model": "m"})
    tool_events = _events(first)
    assert tool_events[1][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_dsh_fixture",
        "name": "Bash",
        "input": {},
    }
    assert json.loads(tool_events[2][1]["delta"]["partial_json"]) == {"command": "echo hi"}
    assert tool_events[4][1]["delta"]["stop_reason"] == "tool_use"
    assert _events(second)[2][1]["delta"]["text"] == "after tool"
    assert third_status == 503
    assert json.loads(third)["error"]["type"] == "api_error"


def test_http_error_answers_status_with_a_json_error_body() -> None:
    with MessagesFixture([HttpError(500, "api_error", "boom")]) as fixture:
        status, headers, data = _request(fixture, "POST", "/v1/messages", {"model": "m"})
    assert status == 500
    assert headers["content-type"] == "application/json"
    assert json.loads(data) == {"type": "error", "error": {"type": "api_error", "message": "boom"}}


def test_exhausted_script_without_default_answers_500() -> None:
    with MessagesFixture() as fixture:
        status, _, _ = _request(fixture, "POST", "/v1/messages", {"model": "m"})
    assert status == 500


def test_hold_answers_nothing_until_released() -> None:
    with MessagesFixture([Hold(then=TextAnswer("late"))]) as fixture:
        results: list[bytes] = []
        worker = threading.Thread(
            target=lambda: results.append(
                _request(fixture, "POST", "/v1/messages", {"model": "m"})[2]
            )
        )
        worker.start()
        fixture.wait_for_holds(1, timeout=10)
        assert results == []
        fixture.release()
        worker.join(timeout=10)
        assert fixture.holding == 0
    assert _events(results[0])[2][1]["delta"]["text"] == "late"


def test_closing_the_fixture_releases_a_bare_hold() -> None:
    fixture = MessagesFixture([Hold()])
    fixture.start()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            _request(fixture, "POST", "/v1/messages", {"model": "m"})
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    fixture.wait_for_holds(1, timeout=10)
    fixture.close()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(errors) == 1


def test_extras_count_tokens_models_head_connect_and_unknown_paths() -> None:
    with MessagesFixture() as fixture:
        assert json.loads(_request(fixture, "POST", "/v1/messages/count_tokens", {})[2]) == {
            "input_tokens": 42
        }
        status, _, models = _request(fixture, "GET", "/v1/models?limit=1")
        assert status == 200
        assert json.loads(models)["data"] == []
        assert _request(fixture, "HEAD", "/")[0] == 200
        status, _, body = _request(fixture, "POST", "/v2/other", {})
        assert status == 404
        assert json.loads(body)["error"]["type"] == "not_found_error"
        assert fixture.message_requests() == []
        assert [r.path for r in fixture.requests()] == [
            "/v1/messages/count_tokens",
            "/v1/models",
            "/",
            "/v2/other",
        ]


def test_wait_for_message_requests_times_out() -> None:
    with MessagesFixture() as fixture, pytest.raises(TimeoutError):
        fixture.wait_for_message_requests(1, timeout=0.05)


def test_base_url_is_loopback_and_requires_start() -> None:
    fixture = MessagesFixture()
    with pytest.raises(RuntimeError):
        _ = fixture.base_url
    with fixture:
        assert fixture.base_url.startswith("http://127.0.0.1:")


def test_keyless_home_isolates_every_product_directory(tmp_path: Path) -> None:
    home = keyless_claude_home(tmp_path, "http://127.0.0.1:9", settings_model="marker-model")
    env = home.env
    assert env["ANTHROPIC_API_KEY"] == DEFAULT_FAKE_API_KEY
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    for name in ("HOME", "CLAUDE_CONFIG_DIR", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        value = env[name]
        assert value is not None
        assert Path(value).is_dir()
        assert Path(value).is_relative_to(tmp_path)
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["ANTHROPIC_MODEL"] is None
    settings = json.loads((home.config_dir / "settings.json").read_text())
    assert settings == {"model": "marker-model"}
    assert home.workspace.is_dir()
    assert list(home.workspace.iterdir()) == []


def test_keyless_home_without_settings_writes_none(tmp_path: Path) -> None:
    home = keyless_claude_home(tmp_path, "http://127.0.0.1:9")
    assert not (home.config_dir / "settings.json").exists()
    with pytest.raises(ValueError, match="api_key"):
        keyless_claude_home(tmp_path, "http://127.0.0.1:9", api_key="")


# -- raw body and routing -----------------------------------------------------------------


def _raw_post(fixture: MessagesFixture, payload: bytes) -> int:
    conn = http.client.HTTPConnection(urlsplit(fixture.base_url).netloc, timeout=10)
    try:
        conn.request("POST", "/v1/messages", body=payload)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_raw_body_keeps_the_exact_bytes_json_or_not() -> None:
    payload = b'{"model": "m",   "messages": ["\\u00e9"]}'
    with MessagesFixture(default=TextAnswer("A")) as fixture:
        _raw_post(fixture, payload)
        _raw_post(fixture, b"not json \xff")
        _request(fixture, "GET", "/v1/models")
        json_request, other, bodiless = fixture.requests()
    assert json_request.raw_body == payload
    assert json_request.body == {"model": "m", "messages": ["é"]}
    assert (other.raw_body, other.body) == (b"not json \xff", None)
    assert (bodiless.raw_body, bodiless.body) == (b"", None)


def _route_by_body(seen: list[RecordedRequest]) -> Route:
    def route(request: RecordedRequest) -> Behaviour | None:
        seen.append(request)
        text = request.raw_body.decode()
        if "please hold" in text:
            return Hold(then=TextAnswer("released"))
        if "please fail" in text:
            return HttpError(529, "overloaded_error", "routed failure")
        if "use the script" in text:
            return None
        if "please crash" in text:
            raise LookupError("route bug")
        return TextAnswer(f"routed: {request.body['messages'][0]}")

    return route


def test_route_answers_each_request_by_what_it_carries_even_concurrently() -> None:
    seen: list[RecordedRequest] = []
    with MessagesFixture(route=_route_by_body(seen)) as fixture:
        held: list[bytes] = []
        worker = threading.Thread(
            target=lambda: held.append(
                _request(fixture, "POST", "/v1/messages", {"messages": ["please hold"]})[2]
            )
        )
        worker.start()
        fixture.wait_for_holds(1, timeout=10)
        # The held request is still open: a FIFO script could not answer this one first.
        _, _, second = _request(fixture, "POST", "/v1/messages", {"messages": ["second"]})
        status, _, failed = _request(fixture, "POST", "/v1/messages", {"messages": ["please fail"]})
        fixture.release()
        worker.join(timeout=10)
        assert seen == fixture.message_requests()  # the very recorded requests, in order
    assert _events(second)[2][1]["delta"]["text"] == "routed: second"
    assert (status, json.loads(failed)["error"]["type"]) == (529, "overloaded_error")
    assert _events(held[0])[2][1]["delta"]["text"] == "released"


def test_route_returning_none_takes_the_script_then_the_default() -> None:
    seen: list[RecordedRequest] = []
    with MessagesFixture(
        [TextAnswer("scripted")], default=TextAnswer("default"), route=_route_by_body(seen)
    ) as fixture:
        body = {"messages": ["use the script"]}
        _, _, first = _request(fixture, "POST", "/v1/messages", body)
        _, _, second = _request(fixture, "POST", "/v1/messages", body)
    assert _events(first)[2][1]["delta"]["text"] == "scripted"
    assert _events(second)[2][1]["delta"]["text"] == "default"
    assert len(seen) == 2


def test_a_raising_route_answers_500_and_the_request_stays_recorded() -> None:
    with MessagesFixture(default=TextAnswer("never"), route=_route_by_body([])) as fixture:
        status, _, body = _request(fixture, "POST", "/v1/messages", {"messages": ["please crash"]})
        [recorded] = fixture.message_requests()
    assert (status, json.loads(body)) == (
        500,
        {
            "type": "error",
            "error": {"type": "api_error", "message": "dsh fixture route raised LookupError"},
        },
    )
    assert recorded.body == {"messages": ["please crash"]}


def test_route_is_not_asked_about_count_tokens_or_other_paths() -> None:
    seen: list[RecordedRequest] = []
    with MessagesFixture(route=_route_by_body(seen)) as fixture:
        assert _request(fixture, "POST", "/v1/messages/count_tokens", {})[0] == 200
        assert _request(fixture, "POST", "/v2/other", {})[0] == 404
    assert seen == []
