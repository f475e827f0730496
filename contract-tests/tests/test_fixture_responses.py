"""The loopback Responses fixture: scripting, recording and configuration helpers."""

from __future__ import annotations

import http.client
import json
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dsh_contract_tests.fixtures.responses import (
    Behaviour,
    CommentaryThenAnswer,
    FunctionCall,
    Hold,
    HttpError,
    PlainAnswer,
    RecordedRequest,
    ResponsesFixture,
    ResponseUsage,
    Route,
    Stall,
    TruncatedStream,
    codex_keyless_env,
    write_codex_config,
)


def _post(
    fixture: ResponsesFixture, body: dict[str, Any], path: str = "/v1/responses"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fixture.port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"authorization": "Bearer sekrit", "content-type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line.removeprefix("data: ")))
    return events


def _texts(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    return [(item["content"][0]["text"], item.get("phase")) for item in done]


def test_plain_answer_streams_the_full_lifecycle_and_records_the_request() -> None:
    with ResponsesFixture([PlainAnswer("exact answer\n")]) as fixture:
        status, headers, raw = _post(
            fixture, {"model": "m1", "input": [{"content": [{"text": "T"}]}]}
        )
        assert fixture.base_url == f"http://127.0.0.1:{fixture.port}/v1"
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = _events(raw)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert raw.endswith(b"data: [DONE]\n\n")
    assert _texts(events) == [("exact answer\n", None)]
    (request,) = fixture.requests
    assert (request.method, request.path, request.bearer_token) == (
        "POST",
        "/v1/responses",
        "sekrit",
    )
    assert request.model == "m1"
    assert request.input_texts() == ["T"]


def test_commentary_then_answer_carries_phases() -> None:
    with ResponsesFixture([CommentaryThenAnswer("thinking", "final")]) as fixture:
        _, _, raw = _post(fixture, {})
    assert _texts(_events(raw)) == [("thinking", "commentary"), ("final", "final_answer")]


def test_function_call_picks_the_first_advertised_candidate_then_next_behaviour() -> None:
    call = FunctionCall((("shell_command", {"command": "x"}), ("exec_command", {"cmd": "y"})))
    tools = {"tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}]}
    with ResponsesFixture([call, PlainAnswer("after")]) as fixture:
        _, _, first = _post(fixture, tools)
        _, _, second = _post(fixture, tools)
    done = [e for e in _events(first) if e["type"] == "response.output_item.done"]
    assert done[0]["item"]["name"] == "exec_command"
    assert json.loads(done[0]["item"]["arguments"]) == {"cmd": "y"}
    assert _texts(_events(second)) == [("after", None)]


def test_function_call_without_an_advertised_tool_is_a_500() -> None:
    with ResponsesFixture([FunctionCall((("nope", {}),))]) as fixture:
        status, _, raw = _post(fixture, {"tools": []})
    assert status == 500
    assert b"none of the fixture function calls was advertised" in raw


def test_http_error_status_and_json_body() -> None:
    with ResponsesFixture([HttpError(503, "busy")]) as fixture:
        status, headers, raw = _post(fixture, {})
    assert status == 503
    assert headers["content-type"] == "application/json"
    assert json.loads(raw) == {"error": {"message": "busy"}}


def test_exhausted_script_and_unknown_path() -> None:
    with ResponsesFixture() as fixture:
        assert _post(fixture, {})[0] == 500
        assert _post(fixture, {}, path="/v1/other")[0] == 404
        assert [r.path for r in fixture.requests] == ["/v1/responses", "/v1/other"]


def test_truncated_stream_never_completes() -> None:
    with ResponsesFixture([TruncatedStream("half")]) as fixture:
        _, _, raw = _post(fixture, {})
    types = [e["type"] for e in _events(raw)]
    assert "response.completed" not in types
    assert b"[DONE]" not in raw
    assert types[0] == "response.created"


def test_hold_waits_for_release_then_completes() -> None:
    results: list[bytes] = []
    with ResponsesFixture([Hold(then=PlainAnswer("released"))]) as fixture:
        worker = threading.Thread(target=lambda: results.append(_post(fixture, {})[2]))
        worker.start()
        fixture.wait_for_hold(timeout=10)
        assert fixture.holding == 1
        assert results == []
        fixture.release()
        worker.join(timeout=10)
    assert _texts(_events(results[0])) == [("released", None)]


def test_close_truncates_a_held_stream() -> None:
    results: list[bytes] = []
    fixture = ResponsesFixture([Hold(then=PlainAnswer("never"))]).start()
    worker = threading.Thread(target=lambda: results.append(_post(fixture, {})[2]))
    worker.start()
    fixture.wait_for_hold(timeout=10)
    fixture.close()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert b"never" not in results[0]
    fixture.close()  # idempotent


def test_wait_for_requests_times_out() -> None:
    with ResponsesFixture() as fixture, pytest.raises(TimeoutError):
        fixture.wait_for_requests(1, timeout=0.05)


def test_codex_config_is_keyless_and_retry_free(tmp_path: Path) -> None:
    path = write_codex_config(tmp_path / "ch", "http://127.0.0.1:9/v1", model="mx", env_key="K")
    config = tomllib.loads(path.read_text())
    assert config["model"] == "mx"
    assert config["model_provider"] == "fixture"
    provider = config["model_providers"]["fixture"]
    assert provider["base_url"] == "http://127.0.0.1:9/v1"
    assert provider["env_key"] == "K"
    assert provider["wire_api"] == "responses"
    assert (provider["request_max_retries"], provider["stream_max_retries"]) == (0, 0)
    assert config["features"]["plugins"] is False
    assert config["analytics"]["enabled"] is False
    assert config["check_for_update_on_startup"] is False


def test_keyless_env_isolates_every_home(tmp_path: Path) -> None:
    env = codex_keyless_env(tmp_path, api_key="k1", env_key="MY_KEY")
    assert env["MY_KEY"] == "k1"
    for name in ("HOME", "CODEX_HOME", "TMPDIR", "XDG_CONFIG_HOME"):
        assert Path(env[name]).is_dir()
        assert Path(env[name]).is_relative_to(tmp_path)
    assert env["NO_PROXY"] == "127.0.0.1,localhost"


# -- routing ------------------------------------------------------------------------------


def _route_by_body(seen: list[RecordedRequest]) -> Route:
    def route(request: RecordedRequest) -> Behaviour | None:
        seen.append(request)
        text = request.raw_body.decode()
        if "please hold" in text:
            return Hold(then=PlainAnswer("released"))
        if "please fail" in text:
            return HttpError(503, "routed failure")
        if "use the script" in text:
            return None
        if "please crash" in text:
            raise LookupError("route bug")
        return PlainAnswer(f"routed: {request.body['input']}")

    return route


def test_route_answers_each_request_by_what_it_carries_even_concurrently() -> None:
    seen: list[RecordedRequest] = []
    with ResponsesFixture(route=_route_by_body(seen)) as fixture:
        held: list[bytes] = []
        worker = threading.Thread(
            target=lambda: held.append(_post(fixture, {"input": "please hold"})[2])
        )
        worker.start()
        fixture.wait_for_hold(timeout=10)
        # The held request is still open: a FIFO script could not answer this one first.
        status, _, raw = _post(fixture, {"input": "second"})
        failed_status, _, failed = _post(fixture, {"input": "please fail"})
        fixture.release()
        worker.join(10)
        assert seen == list(fixture.requests)  # the very recorded requests, in order
    assert (status, _texts(_events(raw))) == (200, [("routed: second", None)])
    assert (failed_status, json.loads(failed)) == (503, {"error": {"message": "routed failure"}})
    assert _texts(_events(held[0])) == [("released", None)]


def test_route_returning_none_takes_the_script() -> None:
    seen: list[RecordedRequest] = []
    with ResponsesFixture([PlainAnswer("scripted")], route=_route_by_body(seen)) as fixture:
        _, _, first = _post(fixture, {"input": "use the script"})
        exhausted, _, body = _post(fixture, {"input": "use the script"})
    assert _texts(_events(first)) == [("scripted", None)]
    assert (exhausted, json.loads(body)["error"]["message"]) == (500, "fixture script exhausted")


def test_a_raising_route_answers_500_and_the_request_stays_recorded() -> None:
    with ResponsesFixture(route=_route_by_body([])) as fixture:
        status, _, body = _post(fixture, {"input": "please crash"})
        [recorded] = fixture.requests
    assert (status, json.loads(body)) == (
        500,
        {"error": {"message": "fixture route raised LookupError"}},
    )
    assert recorded.body == {"input": "please crash"}


def test_route_is_not_asked_about_other_paths() -> None:
    seen: list[RecordedRequest] = []
    with ResponsesFixture(route=_route_by_body(seen)) as fixture:
        status, _, _ = _post(fixture, {"input": "x"}, path="/v1/elsewhere")
    assert status == 404
    assert seen == []


# -- exact usage, call ids, silence mid-stream ---------------------------------------------


def _completed_usage(events: list[dict[str, Any]]) -> dict[str, Any]:
    (done,) = [e for e in events if e["type"] == "response.completed"]
    usage: dict[str, Any] = done["response"]["usage"]
    return usage


def test_scripted_usage_is_reported_exactly_in_response_completed() -> None:
    tools = {"tools": [{"type": "function", "name": "exec_command"}]}
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "ls"}),), ResponseUsage(100, 20), "call_one"),
        PlainAnswer("a", usage=ResponseUsage(150, 30, cached_tokens=90, reasoning_tokens=7)),
        CommentaryThenAnswer("c", "d", usage=ResponseUsage(3, 2)),
    ]
    with ResponsesFixture(script) as fixture:
        call, answer, both = (_events(_post(fixture, tools)[2]) for _ in range(3))
    assert _completed_usage(call) == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120,
    }
    assert _completed_usage(answer) == {
        "input_tokens": 150,
        "input_tokens_details": {"cached_tokens": 90},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 7},
        "total_tokens": 180,
    }
    assert _completed_usage(both)["total_tokens"] == 5
    (item,) = [e["item"] for e in call if e["type"] == "response.output_item.done"]
    assert (item["call_id"], item["id"]) == ("call_one", "fc_one")


def test_behaviours_without_usage_keep_the_default_counts_and_call_id() -> None:
    tools = {"tools": [{"type": "function", "name": "f"}]}
    with ResponsesFixture([PlainAnswer("x"), FunctionCall((("f", {}),))]) as fixture:
        answer, call = (_events(_post(fixture, tools)[2]) for _ in range(2))
    usage = _completed_usage(answer)
    assert (usage["input_tokens"], usage["output_tokens"]) == (10, 1)
    assert _completed_usage(call)["output_tokens"] == 5
    (item,) = [e["item"] for e in call if e["type"] == "response.output_item.done"]
    assert (item["call_id"], item["id"]) == ("call_fixture", "fc_fixture")


def test_held_answer_reports_its_usage() -> None:
    results: list[bytes] = []
    with ResponsesFixture([Hold(then=PlainAnswer("r", usage=ResponseUsage(7, 3)))]) as fixture:
        worker = threading.Thread(target=lambda: results.append(_post(fixture, {})[2]))
        worker.start()
        fixture.wait_for_hold(timeout=10)
        fixture.release()
        worker.join(timeout=10)
    assert _completed_usage(_events(results[0]))["total_tokens"] == 10


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ((-1, 0, 0, 0), "must not be negative"),
        ((5, 1, 6, 0), "cached_tokens is part of input_tokens"),
        ((5, 1, 0, 2), "reasoning_tokens is part of output_tokens"),
    ],
)
def test_impossible_usage_is_refused(counts: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ResponseUsage(*counts)


def test_stall_sends_a_partial_message_then_nothing_until_released() -> None:
    results: list[bytes] = []
    with ResponsesFixture([Stall("half of it")]) as fixture:
        worker = threading.Thread(target=lambda: results.append(_post(fixture, {})[2]))
        worker.start()
        fixture.wait_for_hold(timeout=10)
        assert (fixture.holding, results) == (1, [])  # open, silent, not answered
        fixture.release()
        worker.join(timeout=10)
    events = _events(results[0])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert events[-1]["delta"] == "half of it"
    assert b"[DONE]" not in results[0]


def test_close_cuts_a_stalled_stream() -> None:
    results: list[bytes] = []
    fixture = ResponsesFixture([Stall()]).start()
    worker = threading.Thread(target=lambda: results.append(_post(fixture, {})[2]))
    worker.start()
    fixture.wait_for_hold(timeout=10)
    fixture.close()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert b"response.completed" not in results[0]


def test_a_namespaced_function_call_reaches_a_tool_inside_that_namespace() -> None:
    call = FunctionCall((("delegate", {"prompt": "p"}),), namespace="mcp__dsh")
    tools = {
        "tools": [
            {"type": "function", "name": "delegate"},  # same name outside: not this one
            {
                "type": "namespace",
                "name": "mcp__dsh",
                "tools": [{"type": "function", "name": "delegate"}],
            },
        ]
    }
    follow_up = {"input": [{"type": "function_call_output", "call_id": "c", "output": "ANSWER"}]}
    with ResponsesFixture([call, PlainAnswer("done")]) as fixture:
        _, _, raw = _post(fixture, tools)
        _post(fixture, follow_up)
        missing = FunctionCall((("delegate", {}),), namespace="mcp__other")
        fixture.enqueue(missing)
        status, _, _ = _post(fixture, tools)
    done = [e for e in _events(raw) if e["type"] == "response.output_item.done"]
    assert (done[0]["item"]["name"], done[0]["item"]["namespace"]) == ("delegate", "mcp__dsh")
    first, second, _ = fixture.requests
    assert first.advertised_tools("mcp__dsh") == ["delegate"]
    assert first.advertised_tools("mcp__other") == []
    assert second.function_call_outputs() == ["ANSWER"]
    assert status == 500  # no such namespace advertised
