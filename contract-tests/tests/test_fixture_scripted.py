"""The scripted model (what ``dsh model serve`` runs): its script format and its routing.

Requests are posted over loopback HTTP in the shapes the products send (Codex's
Responses ``input`` items, Claude Code's Messages blocks); the real products against it
are in packages/dsh-cli/tests/test_model_command.py.
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.responses.server import MAX_REQUEST_BYTES
from dsh_contract_tests.fixtures.scripted import (
    KEPT_REQUESTS,
    MAX_SCRIPT_BYTES,
    ScriptedModels,
    ScriptError,
    Served,
    answer_script,
    load_script,
    parse_script,
    shell_command,
)
from dsh_contract_tests.fixtures.scripted.script import RunStep, WriteStep

SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "task_contains": "greeting",
            "steps": [
                {"run": "ls"},
                {"write": "a b.txt", "content": "it's $HOME\n"},
                {"answer": "done"},
            ],
        },
        {"task_contains": "outage", "steps": [{"error": 429, "message": "slow down"}]},
        {"task_contains": "wait", "steps": [{"hold": True, "then": "released"}]},
        {"steps": [{"answer": "fallback"}]},
    ]
}


def _post(base_url: str, path: str, body: Any, **headers: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(urlsplit(base_url).netloc, timeout=30)
    try:
        conn.request(
            "POST", path, json.dumps(body), {"content-type": "application/json", **headers}
        )
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def _codex_body(task: str, results: int = 0) -> dict[str, Any]:
    context = "<environment_context>\n  <cwd>/tmp/greeting</cwd>\n</environment_context>"
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "a greeting"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": context}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
    ]
    for index in range(results):
        items.append({"type": "function_call", "call_id": f"c{index}", "name": "exec_command"})
        items.append({"type": "function_call_output", "call_id": f"c{index}", "output": "ok"})
    tools = [{"type": "function", "name": "exec_command"}]
    return {"model": "m", "input": items, "tools": tools, "stream": True}


def _claude_body(task: str, results: int = 0) -> dict[str, Any]:
    first = [{"type": "text", "text": "<system-reminder>a greeting</system-reminder>"}]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [*first, {"type": "text", "text": task}]}
    ]
    for index in range(results):
        history.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{index}"}]})
        history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{index}"}]}
        )
    return {"model": "claude", "messages": history, "stream": True}


def _events(raw: bytes) -> list[Any]:
    lines = raw.decode().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


@pytest.fixture
def served() -> list[Served]:
    return []


@pytest.fixture
def models(served: list[Served]) -> Any:
    with ScriptedModels(parse_script(SCRIPT), on_served=served.append) as running:
        yield running


# The script format


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ({}, "rules: required field is missing"),
        ({"rules": []}, "rules: Tuple should have at least 1 item"),
        ({"rules": [{"steps": [{"run": "ls"}]}]}, "rules[0].steps: the last step must end"),
        (
            {"rules": [{"steps": [{"answer": "a"}, {"answer": "b"}]}]},
            "rules[0].steps: only the last step may be answer, error or hold",
        ),
        (
            {"rules": [{"steps": [{"write": "f"}]}]},
            "rules[0].steps[0].content: required field is missing",
        ),
        (
            {"rules": [{"steps": [{"error": 200}]}]},
            "rules[0].steps[0].error: Input should be greater than or equal to 400",
        ),
        (
            {"rules": [{"steps": [{"answer": "a", "run": "ls"}]}]},
            "rules[0].steps[0]: a step has exactly one of the keys answer, run, write, error, hold",
        ),
        ({"rules": [{"steps": [{"answer": "a"}], "match": "x"}]}, "rules[0].match: unknown field"),
        ({"rules": [{"task_contains": "", "steps": [{"answer": "a"}]}]}, "rules[0].task_contains"),
        ({"rules": [{"steps": [{"hold": False}]}]}, "rules[0].steps[0].hold: Input should be True"),
    ],
)
def test_a_bad_script_names_the_field(script: Any, problem: str) -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script(script, "model.toml")
    message = str(caught.value)
    assert message.startswith("model.toml: "), message
    assert problem in message, message
    assert "\n" not in message


def test_only_the_offending_field_is_named_not_its_list_as_too_short() -> None:
    # pydantic also calls a list "too short" when its only item failed: that is noise.
    with pytest.raises(ScriptError) as caught:
        parse_script({"rules": [{"steps": [{"error": 200}]}]}, "s")
    assert (
        str(caught.value)
        == "s: rules[0].steps[0].error: Input should be greater than or equal to 400"
    )


def test_toml_and_json_files_load_alike(tmp_path: Path) -> None:
    toml = tmp_path / "model.toml"
    toml.write_text(
        '[[rules]]\ntask_contains = "x"\nsteps = [{ run = "ls" }, { answer = "done" }]\n',
        encoding="utf-8",
    )
    as_json = tmp_path / "model.json"
    as_json.write_text(
        json.dumps(
            {"rules": [{"task_contains": "x", "steps": [{"run": "ls"}, {"answer": "done"}]}]}
        ),
        encoding="utf-8",
    )
    assert load_script(toml) == load_script(as_json)
    shouted = tmp_path / "MODEL.JSON"
    shouted.write_bytes(as_json.read_bytes())
    assert load_script(shouted) == load_script(toml)


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("bad.toml", "rules = [", "bad.toml: not valid TOML"),
        ("bad.json", "{", "bad.json: not valid JSON"),
        ("bad.toml", b"\xff\xfe", "bad.toml: not UTF-8 text"),
        ("big.toml", "#" * (MAX_SCRIPT_BYTES + 1), "big.toml: larger than"),
    ],
)
def test_an_unreadable_script_is_one_line(
    tmp_path: Path, name: str, content: str | bytes, problem: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_script_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read the script: No such file or directory"):
        load_script(tmp_path / "nope.toml")


def test_a_write_step_is_a_shell_command_that_writes_exactly_the_content() -> None:
    # Quotes, $ and newlines reach the file unexpanded; the path may hold spaces.
    command = shell_command(WriteStep(write="a b.txt", content="it's $HOME\n"))
    assert command == "printf '%s' 'it'\"'\"'s $HOME\n' > 'a b.txt'"
    assert shell_command(RunStep(run="ls -l")) == "ls -l"


# Routing by task text and step


def test_codex_gets_each_step_by_the_tool_results_its_request_carries(
    models: ScriptedModels, served: list[Served]
) -> None:
    url = models.responses.base_url
    status, raw = _post(url, "/v1/responses", _codex_body("write the greeting"))
    assert status == 200
    calls = [e["item"] for e in _events(raw) if e.get("type") == "response.output_item.done"]
    assert [(c["type"], c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("function_call", "exec_command", {"cmd": "ls"})
    ]
    status, raw = _post(url, "/v1/responses", _codex_body("write the greeting", results=1))
    calls = [e["item"] for e in _events(raw) if e.get("type") == "response.output_item.done"]
    expected = shell_command(WriteStep(write="a b.txt", content="it's $HOME\n"))
    assert json.loads(calls[0]["arguments"]) == {"cmd": expected}
    status, raw = _post(url, "/v1/responses", _codex_body("write the greeting", results=2))
    assert b'"text": "done"' in raw
    assert [(s.wire, s.rule, s.step, s.kind) for s in served] == [
        ("responses", 0, 1, "run"),
        ("responses", 0, 2, "write"),
        ("responses", 0, 3, "answer"),
    ]


def test_the_products_tagged_context_never_matches_a_rule(models: ScriptedModels) -> None:
    # "greeting" is in the developer message and the tagged context, not in the task.
    _, raw = _post(models.responses.base_url, "/v1/responses", _codex_body("something else"))
    assert b'"text": "fallback"' in raw
    _, raw = _post(models.messages.base_url, "/v1/messages", _claude_body("something else"))
    assert b"fallback" in raw


def test_claude_code_gets_each_step_as_a_bash_tool_use(
    models: ScriptedModels, served: list[Served]
) -> None:
    url = models.messages.base_url
    status, raw = _post(url, "/v1/messages", _claude_body("write the greeting"))
    assert status == 200
    uses = [
        e["content_block"]
        for e in _events(raw)
        if e.get("type") == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    assert [(u["name"], u["id"]) for u in uses] == [("Bash", "toolu_dsh_1_1")]
    _, raw = _post(url, "/v1/messages", _claude_body("write the greeting", results=2))
    assert b"done" in raw
    assert [(s.wire, s.step, s.kind) for s in served] == [
        ("messages", 1, "run"),
        ("messages", 3, "answer"),
    ]


def test_an_error_step_is_that_http_status_on_both_wires(models: ScriptedModels) -> None:
    status, raw = _post(models.responses.base_url, "/v1/responses", _codex_body("outage"))
    assert (status, json.loads(raw)) == (429, {"error": {"message": "slow down"}})
    status, raw = _post(models.messages.base_url, "/v1/messages", _claude_body("outage"))
    assert status == 429
    assert json.loads(raw)["error"] == {"type": "rate_limit_error", "message": "slow down"}


def test_a_request_past_the_last_step_is_http_500_and_reported(
    models: ScriptedModels, served: list[Served]
) -> None:
    status, raw = _post(models.responses.base_url, "/v1/responses", _codex_body("outage", 1))
    assert status == 500
    assert b"the script has no step for this request" in raw
    assert served[-1] == Served("responses", 1, 2, 1, "past the last step")


def test_no_matching_rule_is_http_500_and_reported(served: list[Served]) -> None:
    script = parse_script({"rules": [{"task_contains": "only", "steps": [{"answer": "a"}]}]})
    with ScriptedModels(script, on_served=served.append) as running:
        status, _ = _post(running.messages.base_url, "/v1/messages", _claude_body("other"))
    assert status == 500
    assert served == [Served("messages", None, 1, 0, "no rule matches the task")]


def test_a_hold_answers_then_once_released(models: ScriptedModels) -> None:
    replies: list[tuple[int, bytes]] = []
    waiter = threading.Thread(
        target=lambda: replies.append(
            _post(models.messages.base_url, "/v1/messages", _claude_body("wait"))
        )
    )
    waiter.start()
    models.messages.wait_for_holds(1, timeout=30)
    assert replies == []
    models.release()
    waiter.join(timeout=30)
    assert [status for status, _ in replies] == [200]
    assert b"released" in replies[0][1]


def test_both_servers_listen_on_loopback_only_and_stop_on_close(served: list[Served]) -> None:
    running = ScriptedModels(parse_script(SCRIPT), on_served=served.append)
    running.start()
    urls = [running.responses.base_url, running.messages.base_url]
    running.close()
    for url in urls:
        assert urlsplit(url).hostname == "127.0.0.1"
        with pytest.raises(ConnectionRefusedError):
            _post(url, "/v1/responses", {})


def test_the_record_is_bounded(models: ScriptedModels) -> None:
    for _ in range(KEPT_REQUESTS + 5):
        _post(models.messages.base_url, "/v1/messages/count_tokens", {})
        _post(models.responses.base_url, "/v1/nothing", {})
    assert len(models.messages.requests()) == KEPT_REQUESTS
    assert len(models.responses.requests) == KEPT_REQUESTS


@pytest.mark.parametrize("wire", ["responses", "messages"])
def test_a_body_larger_than_the_bound_is_refused_unread(wire: str) -> None:
    fixture: Any = (
        responses.ResponsesFixture([responses.PlainAnswer("x")])
        if wire == "responses"
        else messages.MessagesFixture(default=messages.TextAnswer("x"))
    )
    with fixture:
        base = fixture.base_url
        conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=30)
        try:
            conn.putrequest("POST", f"/v1/{wire}")
            conn.putheader("content-length", str(MAX_REQUEST_BYTES + 1))
            conn.endheaders()  # the body is never sent: the answer must not wait for it
            reply = conn.getresponse()
            assert reply.status == 413
        finally:
            conn.close()
        recorded = fixture.requests if wire == "responses" else fixture.requests()
        assert list(recorded) == []


@pytest.mark.parametrize("wire", ["responses", "messages"])
def test_stopping_the_server_cuts_a_hold_and_never_answers_its_then(
    served: list[Served], wire: str
) -> None:
    running = ScriptedModels(parse_script(SCRIPT), on_served=served.append)
    running.start()
    outcome: list[Any] = []

    def ask() -> None:
        try:
            if wire == "responses":
                outcome.append(
                    _post(running.responses.base_url, "/v1/responses", _codex_body("wait"))
                )
            else:
                outcome.append(
                    _post(running.messages.base_url, "/v1/messages", _claude_body("wait"))
                )
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(type(exc))

    waiter = threading.Thread(target=ask)
    waiter.start()
    fixture: Any = running.responses if wire == "responses" else running.messages
    if wire == "responses":
        fixture.wait_for_hold(timeout=30)
    else:
        fixture.wait_for_holds(1, timeout=30)
    running.close()
    waiter.join(timeout=30)
    assert len(outcome) == 1
    assert not (isinstance(outcome[0], tuple) and b"released" in outcome[0][1]), outcome


def test_a_follow_up_task_takes_its_own_rule_from_step_one(
    models: ScriptedModels, served: list[Served]
) -> None:
    # The continued session carries the first task and its tool results; the follow-up's
    # own text picks the rule, and only results after it count.
    codex = _codex_body("write the greeting", results=2)
    codex["input"].append(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "outage"}]}
    )
    status, _ = _post(models.responses.base_url, "/v1/responses", codex)
    claude = _claude_body("write the greeting", results=2)
    claude["messages"].append({"role": "user", "content": [{"type": "text", "text": "outage"}]})
    _post(models.messages.base_url, "/v1/messages", claude)
    assert status == 429
    assert [(s.rule, s.step, s.kind) for s in served] == [(1, 1, "error"), (1, 1, "error")]


def test_a_messages_script_answers_claude_code_while_the_script_answers_codex() -> None:
    """Two products answering one task differently (what ``dsh demo`` needs)."""
    other = answer_script("for claude only")
    assert other == parse_script({"rules": [{"steps": [{"answer": "for claude only"}]}]})
    with ScriptedModels(parse_script(SCRIPT), messages_script=other) as running:
        _, claude = _post(running.messages.base_url, "/v1/messages", _claude_body("anything"))
        _, codex = _post(running.responses.base_url, "/v1/responses", _codex_body("anything"))
    assert "for claude only" in json.dumps(_events(claude))
    assert "for claude only" not in json.dumps(_events(codex))
    assert "fallback" in json.dumps(_events(codex))
