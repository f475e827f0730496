"""The directive routes answer each loopback model request as its run's directive asks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dsh_contract_tests import (
    LoopbackDirectiveRoute,
    MessagesDirectiveRoute,
    ResponsesDirectiveRoute,
)
from dsh_contract_tests.fixtures import loopback, messages, responses
from dsh_contract_tests.reach import RELAY_LIMIT, command_line, find_command


def _responses_request(text: str) -> responses.RecordedRequest:
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}]}
    raw = json.dumps(body).encode()
    return responses.RecordedRequest("POST", "/v1/responses", {}, raw, body)


def _messages_request(text: str) -> messages.RecordedRequest:
    body = {"messages": [{"role": "user", "content": text}]}
    return messages.RecordedRequest("POST", "/v1/messages", "", {}, body, json.dumps(body).encode())


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (
            "do it\ndsh-contract/1 complete T-00aa11",
            responses.PlainAnswer("T-00aa11", phase="final_answer"),
        ),
        ("dsh-contract/1 fail T-00aa11", responses.HttpError(500, "planted raw error")),
        ("dsh-contract/1 hold T-00aa11", responses.Hold()),
        ("no directive here", responses.PlainAnswer("ok")),
    ],
)
def test_responses_route_follows_the_directive(task: str, expected: responses.Behaviour) -> None:
    route = ResponsesDirectiveRoute()
    route.error_text = "planted raw error"
    assert route(_responses_request(task)) == expected


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("dsh-contract/1 complete T-00aa11", messages.TextAnswer("T-00aa11")),
        ("dsh-contract/1 fail T-00aa11", messages.HttpError(500, "fixture error")),
        ("dsh-contract/1 hold T-00aa11", messages.Hold()),
        ("plain", messages.TextAnswer("ok")),
    ],
)
def test_messages_route_follows_the_directive(task: str, expected: messages.Behaviour) -> None:
    assert MessagesDirectiveRoute()(_messages_request(task)) == expected


def _with_schema(request: responses.RecordedRequest) -> responses.RecordedRequest:
    body = {**request.body, "text": {"format": {"type": "json_schema", "schema": {}}}}
    return responses.RecordedRequest("POST", "/v1/responses", {}, json.dumps(body).encode(), body)


@pytest.mark.parametrize(
    ("behaviour", "schema", "expected"),
    [
        ("complete", True, '{"token": "T-00aa11"}'),
        ("misshapen", True, '{"token": 7}'),
        ("complete", False, "T-00aa11"),
        ("misshapen", False, "T-00aa11"),
    ],
)
def test_responses_route_answers_in_the_schemas_form_only_when_asked(
    behaviour: str, schema: bool, expected: str
) -> None:
    request = _responses_request(f"dsh-contract/1 {behaviour} T-00aa11")
    if schema:
        request = _with_schema(request)
    assert ResponsesDirectiveRoute()(request) == responses.PlainAnswer(
        expected, phase="final_answer"
    )


def _messages_with_tool(content: object) -> messages.RecordedRequest:
    body = {
        "tools": [{"name": "StructuredOutput", "input_schema": {}}],
        "messages": [
            {"role": "user", "content": "dsh-contract/1 complete T-00aa11"},
            {"role": "user", "content": content},
        ],
    }
    return messages.RecordedRequest("POST", "/v1/messages", "", {}, body, json.dumps(body).encode())


def test_messages_route_calls_the_structured_output_tool_then_ends_the_turn() -> None:
    route = MessagesDirectiveRoute()
    first = route(_messages_with_tool("go"))
    assert first == messages.ToolUse("StructuredOutput", {"token": "T-00aa11"})
    after = route(_messages_with_tool([{"type": "tool_result", "tool_use_id": "x"}]))
    assert after == messages.TextAnswer("Done.")
    assert route(_messages_request("dsh-contract/1 misshapen T-00aa11")) == messages.TextAnswer(
        "T-00aa11"
    )


# -- reach: the confinement rules' command ------------------------------------------------

_REACH_COMMAND = "cat '/home/user/.ssh/id_ed25519'; echo \"done\""
_REACH_TASK = f"dsh-contract/1 reach T-00aa11\nContract task. {command_line(_REACH_COMMAND)}"


def test_the_reach_command_survives_a_json_body_and_is_not_in_the_task_verbatim() -> None:
    body = json.dumps({"input": _REACH_TASK})
    assert find_command(body) == _REACH_COMMAND
    assert "id_ed25519" not in _REACH_TASK
    assert find_command("dsh-contract/1 command !!!") is None


def test_responses_route_calls_the_shell_tool_then_relays_its_output() -> None:
    route = ResponsesDirectiveRoute()
    first = _responses_request(_REACH_TASK)
    first.body["tools"] = [{"type": "function", "name": "exec_command"}]
    first = responses.RecordedRequest(
        "POST", "/v1/responses", {}, json.dumps(first.body).encode(), first.body
    )
    call = route(first)
    assert isinstance(call, responses.FunctionCall)
    assert ("exec_command", {"cmd": _REACH_COMMAND}) in call.candidates
    body = {
        **first.body,
        "input": [
            *first.body["input"],
            {"type": "function_call_output", "call_id": call.call_id, "output": "denied"},
        ],
    }
    after = responses.RecordedRequest("POST", "/v1/responses", {}, json.dumps(body).encode(), body)
    assert route(after) == responses.PlainAnswer("T-00aa11\ndenied", phase="final_answer")


def test_responses_route_answers_a_side_request_without_a_shell_tool_with_the_token() -> None:
    answer = ResponsesDirectiveRoute()(_responses_request(_REACH_TASK))
    assert answer == responses.PlainAnswer("T-00aa11", phase="final_answer")


def test_messages_route_calls_bash_then_relays_its_output() -> None:
    route = MessagesDirectiveRoute()
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": _REACH_TASK}],
        "tools": [{"name": "Bash"}],
    }
    first = messages.RecordedRequest(
        "POST", "/v1/messages", "", {}, body, json.dumps(body).encode()
    )
    assert route(first) == messages.ToolUse("Bash", {"command": _REACH_COMMAND}, "toolu_dsh_reach")
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_dsh_reach",
        "content": [{"type": "text", "text": "x" * 3000 + "denied"}],
    }
    body = {**body, "messages": [*body["messages"], {"role": "user", "content": [result]}]}
    after = messages.RecordedRequest(
        "POST", "/v1/messages", "", {}, body, json.dumps(body).encode()
    )
    answer = route(after)
    assert isinstance(answer, messages.TextAnswer)
    assert answer.text.startswith("T-00aa11\nxx")
    assert answer.text.endswith("denied")
    assert len(answer.text) == len("T-00aa11\n") + RELAY_LIMIT  # bounded: the end is kept
    side = {"messages": [{"role": "user", "content": _REACH_TASK}]}
    side_request = messages.RecordedRequest(
        "POST", "/v1/messages", "", {}, side, json.dumps(side).encode()
    )
    assert route(side_request) == messages.TextAnswer("T-00aa11")


def _loopback_request(body: dict[str, Any]) -> loopback.RecordedRequest:
    return loopback.RecordedRequest(
        "POST", "/v1/chat/completions", {}, json.dumps(body).encode(), body
    )


def _chat_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {}}}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("bash", {"command": _REACH_COMMAND, "description": "Run the task's command."}),
        (
            "run_shell_command",
            {"command": _REACH_COMMAND, "description": "Run the task's command."},
        ),
        ("shell", {"command": _REACH_COMMAND}),
    ],
)
def test_loopback_route_calls_the_chat_shell_tool_offered_then_relays_its_output(
    tool: str, arguments: dict[str, Any]
) -> None:
    route = LoopbackDirectiveRoute()
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": _REACH_TASK}],
        "tools": [_chat_tool("read"), _chat_tool(tool)],
    }
    call = route(_loopback_request(body))
    assert isinstance(call, loopback.ToolCall)
    offered = [candidate for candidate in call.candidates if candidate[0] == tool]
    assert offered == [(tool, arguments)]
    assert call.call_id == "call_dsh_reach"
    called = {"role": "assistant", "tool_calls": [{"id": call.call_id, "type": "function"}]}
    result = {"role": "tool", "tool_call_id": call.call_id, "content": "x" * 3000 + "denied"}
    body = {**body, "messages": [*body["messages"], called, result]}
    answer = route(_loopback_request(body))
    assert isinstance(answer, loopback.TextAnswer)
    assert answer.text.startswith("T-00aa11\nxx")
    assert answer.text.endswith("denied")
    assert len(answer.text) == len("T-00aa11\n") + RELAY_LIMIT  # bounded: the end is kept


def test_loopback_route_calls_the_gemini_shell_tool_then_relays_its_function_response() -> None:
    route = LoopbackDirectiveRoute()
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": _REACH_TASK}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file"}, {"name": "run_shell_command"}]}],
    }
    call = route(_loopback_request(body))
    assert isinstance(call, loopback.ToolCall)
    assert (
        "run_shell_command",
        {"command": _REACH_COMMAND, "description": "Run the task's command."},
    ) in call.candidates
    response = {"functionResponse": {"name": "run_shell_command", "response": {"output": "denied"}}}
    body = {**body, "contents": [*body["contents"], {"role": "user", "parts": [response]}]}
    assert route(_loopback_request(body)) == loopback.TextAnswer("T-00aa11\ndenied")
    other = {"functionResponse": {"name": "run_shell_command", "response": {"error": "no"}}}
    body = {**body, "contents": [*body["contents"][:1], {"role": "user", "parts": [other]}]}
    assert route(_loopback_request(body)) == loopback.TextAnswer('T-00aa11\n{"error": "no"}')


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": _REACH_TASK}]},
        {"messages": [{"role": "user", "content": _REACH_TASK}], "tools": [_chat_tool("read")]},
        {
            "messages": [{"role": "user", "content": "dsh-contract/1 reach T-00aa11"}],
            "tools": [_chat_tool("bash")],
        },
    ],
    ids=["no-tools", "no-shell-tool", "no-command"],
)
def test_loopback_route_answers_reach_without_a_shell_tool_or_command_with_the_token(
    body: dict[str, Any],
) -> None:
    assert LoopbackDirectiveRoute()(_loopback_request(body)) == loopback.TextAnswer("T-00aa11")


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("dsh-contract/1 complete T-00aa11", loopback.TextAnswer("T-00aa11")),
        ("dsh-contract/1 misshapen T-00aa11", loopback.TextAnswer("T-00aa11")),
        ("dsh-contract/1 fail T-00aa11", loopback.HttpError(400, "fixture error")),
        ("dsh-contract/1 hold T-00aa11", loopback.Hold()),
        ("plain", loopback.TextAnswer("ok")),
    ],
)
def test_loopback_route_offering_a_shell_tool_keeps_the_other_directives(
    task: str, expected: loopback.Behaviour
) -> None:
    body = {"messages": [{"role": "user", "content": task}], "tools": [_chat_tool("bash")]}
    assert LoopbackDirectiveRoute(fail_status=400)(_loopback_request(body)) == expected
