"""Loopback-model routes that answer each request by the kit directive in its body.

A product provider's kit subclass points its product at a loopback fixture built with one
of these as ``route``; the product then completes, fails or holds exactly as the run's
directive asks (see :mod:`dsh_contract_tests.scenario`), so one fixture serves many
concurrent runs that behave differently.
"""

from __future__ import annotations

import json

from dsh_contract_tests.fixtures import loopback, messages, responses
from dsh_contract_tests.reach import find_command, relayed_answer, tool_output_text
from dsh_contract_tests.scenario import (
    Directive,
    find_directive,
    misshapen_answer,
    recalled_token,
    structured_answer,
)

__all__ = ["LoopbackDirectiveRoute", "MessagesDirectiveRoute", "ResponsesDirectiveRoute"]

_FIXTURE_ERROR = "fixture error"

STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
"""The tool Claude Code offers the model when it was given a JSON schema (``--json-schema``)."""


def _shaped(directive: Directive) -> dict[str, object]:
    if directive.behaviour == "misshapen":
        return misshapen_answer()
    return structured_answer(directive.token)


def _responses_schema(body: object) -> bool:
    """Whether a Responses request asks for a JSON-schema answer (``text.format``)."""
    text = body.get("text") if isinstance(body, dict) else None
    fmt = text.get("format") if isinstance(text, dict) else None
    return isinstance(fmt, dict) and fmt.get("type") == "json_schema"


def _messages_schema(body: object) -> bool:
    """Whether a Messages request offers Claude Code's structured-output tool."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("name") == STRUCTURED_OUTPUT_TOOL for tool in tools
    )


SHELL_CALLS = ("exec_command", "shell_command", "shell")
"""The Responses shell tools a ``reach`` directive calls, the first the request offers
(products rename theirs between versions)."""


def _shell_call(command: str) -> responses.FunctionCall:
    arguments: dict[str, dict[str, object]] = {
        "exec_command": {"cmd": command},
        "shell_command": {"command": command},
        "shell": {"command": ["sh", "-c", command]},
    }
    return responses.FunctionCall(
        tuple((name, arguments[name]) for name in SHELL_CALLS), call_id="call_dsh_reach"
    )


def _offers(body: object, name: str) -> bool:
    """Whether a Messages request offers the tool ``name`` (a side request offers none)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("name") == name for tool in tools
    )


def _tool_results(body: object) -> list[str]:
    """The text of every ``tool_result`` block of the request's last message."""
    messages_ = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages_, list) or not messages_:
        return []
    content = messages_[-1].get("content") if isinstance(messages_[-1], dict) else None
    return [
        tool_output_text(block.get("content"))
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def _after_tool_result(body: object) -> bool:
    """Whether the request's last message carries a tool result (the tool call is done)."""
    messages_ = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages_, list) or not messages_:
        return False
    content = messages_[-1].get("content") if isinstance(messages_[-1], dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


LOOPBACK_SHELL_CALLS: tuple[tuple[str, dict[str, object]], ...] = (
    ("run_shell_command", {"description": "Run the task's command."}),
    ("bash", {"description": "Run the task's command."}),
    ("shell", {}),
)
"""The Chat Completions and Gemini shell tools a ``reach`` directive calls, the first the
request offers, with the arguments besides ``command`` each requires."""


def _loopback_tools(body: object) -> set[str]:
    """The tool names a Chat Completions (``tools[].function``) or Gemini
    (``tools[].functionDeclarations[]``) request offers."""
    tools = body.get("tools") if isinstance(body, dict) else None
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        declarations = tool.get("functionDeclarations")
        for entry in [function, *(declarations if isinstance(declarations, list) else [])]:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.add(entry["name"])
    return names


def _function_response_text(response: object) -> str:
    """A Gemini ``functionResponse.response``: its ``output`` text, else the whole object."""
    output = response.get("output") if isinstance(response, dict) else None
    if isinstance(output, str):
        return output
    return json.dumps(response, ensure_ascii=False)


def _loopback_tool_results(body: object) -> list[str]:
    """The text of every tool result the request carries: Chat Completions ``tool``
    messages, Gemini ``functionResponse`` parts (a ``reach`` run makes one call only)."""
    if not isinstance(body, dict):
        return []
    found: list[str] = []
    chat = body.get("messages")
    for message in chat if isinstance(chat, list) else []:
        if isinstance(message, dict) and message.get("role") == "tool":
            found.append(tool_output_text(message.get("content")))
    contents = body.get("contents")
    for content in contents if isinstance(contents, list) else []:
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            called = part.get("functionResponse") if isinstance(part, dict) else None
            if isinstance(called, dict):
                found.append(_function_response_text(called.get("response")))
    return found


def _loopback_reach(request: loopback.RecordedRequest, token: str) -> loopback.Behaviour:
    outputs = _loopback_tool_results(request.body)
    if outputs:
        return loopback.TextAnswer(relayed_answer(token, "\n".join(outputs)))
    command = find_command(json.dumps(request.body, ensure_ascii=False))
    offered = _loopback_tools(request.body)
    if command is None or not offered & {name for name, _ in LOOPBACK_SHELL_CALLS}:
        return loopback.TextAnswer(token)
    return loopback.ToolCall(
        tuple((name, {"command": command, **extra}) for name, extra in LOOPBACK_SHELL_CALLS),
        call_id="call_dsh_reach",
    )


class ResponsesDirectiveRoute:
    """``route`` for :class:`~dsh_contract_tests.fixtures.responses.ResponsesFixture`.

    ``complete`` answers the token as the final answer (with a JSON-schema ``text.format``
    on the request: ``{"token": ...}``, and ``misshapen`` ``{"token": 7}``); ``fail``
    answers HTTP 500 with
    :attr:`error_text` (set it to the run's planted raw error); ``hold`` holds; ``recall``
    answers the token of the session's earlier ``complete`` turn; ``reach`` calls the
    product's shell tool with the task's command (:mod:`dsh_contract_tests.reach`) and,
    once its output came back, answers the token followed by that output; a request
    without a directive gets a plain ``ok``.
    """

    def __init__(self) -> None:
        self.error_text = _FIXTURE_ERROR

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour:
        body = request.raw_body.decode("utf-8", "replace")
        directive = find_directive(body)
        if directive is None:
            return responses.PlainAnswer("ok")
        if directive.behaviour in {"complete", "misshapen"} and _responses_schema(request.body):
            return responses.PlainAnswer(json.dumps(_shaped(directive)), phase="final_answer")
        if directive.behaviour in {"complete", "misshapen"}:
            return responses.PlainAnswer(directive.token, phase="final_answer")
        if directive.behaviour == "recall":
            return responses.PlainAnswer(recalled_token(body), phase="final_answer")
        if directive.behaviour == "reach":
            outputs = request.function_call_outputs()
            if outputs:
                answer = relayed_answer(directive.token, "\n".join(outputs))
                return responses.PlainAnswer(answer, phase="final_answer")
            command = find_command(body)
            if command is not None and set(SHELL_CALLS) & set(request.advertised_tools()):
                return _shell_call(command)
            return responses.PlainAnswer(directive.token, phase="final_answer")
        if directive.behaviour == "fail":
            return responses.HttpError(500, self.error_text)
        return responses.Hold()


class MessagesDirectiveRoute:
    """``route`` for :class:`~dsh_contract_tests.fixtures.messages.MessagesFixture`.

    Same behaviours as :class:`ResponsesDirectiveRoute`, as Anthropic Messages answers
    (``reach`` calls Claude Code's ``Bash`` tool). When
    the request offers Claude Code's ``StructuredOutput`` tool, ``complete`` and
    ``misshapen`` call it with their object (then, after its result, end the turn).
    """

    def __init__(self) -> None:
        self.error_text = _FIXTURE_ERROR

    def __call__(self, request: messages.RecordedRequest) -> messages.Behaviour:
        body = json.dumps(request.body, ensure_ascii=False)
        directive = find_directive(body)
        if directive is None:
            return messages.TextAnswer("ok")
        if directive.behaviour in {"complete", "misshapen"} and _messages_schema(request.body):
            if directive.behaviour == "complete" and _after_tool_result(request.body):
                return messages.TextAnswer("Done.")
            return messages.ToolUse(STRUCTURED_OUTPUT_TOOL, _shaped(directive))
        if directive.behaviour in {"complete", "misshapen"}:
            return messages.TextAnswer(directive.token)
        if directive.behaviour == "recall":
            return messages.TextAnswer(recalled_token(body))
        if directive.behaviour == "reach":
            outputs = _tool_results(request.body)
            if outputs:
                return messages.TextAnswer(relayed_answer(directive.token, "\n".join(outputs)))
            command = find_command(body)
            if command is not None and _offers(request.body, "Bash"):
                return messages.ToolUse("Bash", {"command": command}, "toolu_dsh_reach")
            return messages.TextAnswer(directive.token)
        if directive.behaviour == "fail":
            return messages.HttpError(500, self.error_text)
        return messages.Hold()


class LoopbackDirectiveRoute:
    """``route`` for the Chat Completions and Gemini fixtures (``fixtures.loopback`` wires).

    Same behaviours as :class:`ResponsesDirectiveRoute`. The directive is searched in the
    JSON body, so a product that repeats the conversation in a side request (a title, a
    routing classifier, a memory pass) gets that request answered by the same directive.
    ``fail_status`` (default 500) is the status of a ``fail`` answer: a product that
    retries server errors with a long backoff and no setting to stop it can be failed
    with a status it does not retry (e.g. 400).

    ``reach`` calls the shell tool the request offers (:data:`LOOPBACK_SHELL_CALLS`, by
    name: Gemini CLI's and Qwen Code's ``run_shell_command``, OpenCode's
    ``bash``) with the task's command and, once its result came back (a ``tool`` message,
    or a Gemini ``functionResponse`` part), answers the token followed by that output. A
    request offering none of them (a side request, an unknown agent) gets the bare token,
    so the ``confinement`` reach rules fail for such a product, saying the attempt was
    never reported; they never hang.
    """

    def __init__(self, fail_status: int = 500) -> None:
        self.error_text = _FIXTURE_ERROR
        self.fail_status = fail_status

    def __call__(self, request: loopback.RecordedRequest) -> loopback.Behaviour:
        directive = find_directive(json.dumps(request.body, ensure_ascii=False))
        if directive is None:
            return loopback.TextAnswer("ok")
        if directive.behaviour == "reach":
            return _loopback_reach(request, directive.token)
        if directive.behaviour in {"complete", "misshapen"}:
            return loopback.TextAnswer(directive.token)
        if directive.behaviour == "fail":
            return loopback.HttpError(self.fail_status, self.error_text)
        return loopback.Hold()
