"""Progress and usage of a whole run through the service, with the scripted stand-in CLI."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from claude_harness import Standin
from dsh_subagent import (
    COMPLETED,
    ERROR,
    AssistantText,
    ParentContext,
    ProgressEvent,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent_claude_code import ClaudeCodeProvider

pytestmark = pytest.mark.anyio


def _assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {
        "op": "emit",
        "message": {
            "type": "assistant",
            "message": {"role": "assistant", "model": "standin", "content": list(content)},
            "parent_tool_use_id": None,
            "session_id": "standin-session",
        },
    }


def _tool_result(call_id: str, *, is_error: bool) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": "out", "is_error": is_error}
    return {
        "op": "emit",
        "message": {
            "type": "user",
            "message": {"role": "user", "content": [block]},
            "parent_tool_use_id": None,
            "session_id": "standin-session",
        },
    }


_USAGE = {
    "input_tokens": 11,
    "cache_read_input_tokens": 22,
    "cache_creation_input_tokens": 33,
    "output_tokens": 44,
}

_SCRIPT: list[dict[str, Any]] = [
    {"op": "init"},
    _assistant(
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make check"}},
    ),
    _tool_result("t1", is_error=True),
    _assistant({"type": "text", "text": "Done."}),
]


async def _progress_of(
    provider: ClaudeCodeProvider, standin: Standin, *, commands: bool
) -> tuple[list[ProgressEvent], SubagentResult]:
    request = SubagentStartRequest(
        prompt=(TextBlock(text="the task"),),
        parent=ParentContext(session_id="parent", cwd=str(standin.workspace)),
        progress_commands=commands,
    )
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("claude-code", request)
        with anyio.fail_after(30):
            events = [event async for event in run.progress]  # ends at settlement
            result = await run.result()
        await run.dispose()
    return events, result


@pytest.mark.parametrize("commands", [False, True])
async def test_the_run_streams_what_the_cli_said_and_the_result_carries_its_usage(
    standin: Standin, commands: bool
) -> None:
    provider = standin.provider(
        [*_SCRIPT, {"op": "result", "result": "Done.", "usage": _USAGE, "total_cost_usd": 0.125}]
    )
    events, result = await _progress_of(provider, standin, commands=commands)
    usage = Usage(input_tokens=66, cached_input_tokens=22, output_tokens=44, cost_usd=0.125)
    assert events == [
        TurnStarted(),
        AssistantText(text="Checking."),
        ToolStarted(
            tool_kind="command",
            name="Bash",
            call_id="t1",
            command="make check" if commands else None,
        ),
        ToolFinished(tool_kind="command", name="Bash", call_id="t1", ok=False),
        AssistantText(text="Done."),
        UsageUpdated(usage=usage),
    ]
    assert (result.stop_reason, result.text, result.usage) == (COMPLETED, "Done.", usage)


async def test_an_error_result_still_reports_its_usage(standin: Standin) -> None:
    provider = standin.provider(
        [
            *_SCRIPT,
            {
                "op": "result",
                "subtype": "error_max_turns",
                "is_error": True,
                "result": None,
                "usage": _USAGE,
                "total_cost_usd": 0.5,
            },
            {"op": "exit", "code": 1},
        ]
    )
    events, result = await _progress_of(provider, standin, commands=False)
    usage = Usage(input_tokens=66, cached_input_tokens=22, output_tokens=44, cost_usd=0.5)
    assert events[-1] == UsageUpdated(usage=usage)
    assert (result.stop_reason, result.usage) == (ERROR, usage)


async def test_a_run_whose_cli_states_no_usage_has_none(standin: Standin) -> None:
    provider = standin.provider([{"op": "init"}, {"op": "result", "result": "ok"}])
    events, result = await _progress_of(provider, standin, commands=False)
    assert events == [TurnStarted()]
    assert result.usage is None
