"""Claude Code messages → progress events and usage: the pure mapping."""

from __future__ import annotations

import math
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    Message,
    ResultMessage,
    ServerToolResultBlock,
    ServerToolUseBlock,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent_claude_code.progress import (
    MAX_OPEN_TOOL_CALLS,
    MAX_PLAN_STEPS,
    ClaudeProgress,
    tool_kind,
    usage_of,
)


def _map(*messages: Message, include_commands: bool = False) -> list[ProgressEvent]:
    events: list[ProgressEvent] = []
    progress = ClaudeProgress(events.append, include_commands=include_commands)
    for message in messages:
        progress.observe(message)
    return events


def _assistant(*blocks: Any) -> AssistantMessage:
    return AssistantMessage(content=list(blocks), model="m")


def _use(call_id: str, name: str, **tool_input: Any) -> AssistantMessage:
    return _assistant(ToolUseBlock(id=call_id, name=name, input=tool_input))


def _result(call_id: str, is_error: bool | None = None, structured: Any = None) -> UserMessage:
    block = ToolResultBlock(tool_use_id=call_id, content="product text", is_error=is_error)
    return UserMessage(content=[block], tool_use_result=structured)


def _final(**fields: Any) -> ResultMessage:
    defaults: dict[str, Any] = {
        "subtype": "success",
        "duration_ms": 1,
        "duration_api_ms": 1,
        "is_error": False,
        "num_turns": 1,
        "session_id": "s",
    }
    return ResultMessage(**{**defaults, **fields})


def test_a_run_maps_to_turn_text_tools_file_change_and_usage_in_order() -> None:
    events = _map(
        SystemMessage(subtype="init", data={"type": "system", "subtype": "init"}),
        _assistant(
            ThinkingBlock(thinking="hidden reasoning", signature="sig"),
            TextBlock(text="Looking."),
            ToolUseBlock(id="t1", name="Bash", input={"command": "ls -la"}),
            ToolUseBlock(id="t2", name="Write", input={"file_path": "/w/a.txt", "content": "x"}),
        ),
        _result("t1", is_error=False),
        _result("t2"),
        _assistant(TextBlock(text="DONE")),
        _final(
            total_cost_usd=0.5,
            usage={
                "input_tokens": 10,
                "cache_read_input_tokens": 20,
                "cache_creation_input_tokens": 30,
                "output_tokens": 4,
            },
        ),
    )
    assert events == [
        TurnStarted(),
        AssistantText(text="Looking."),
        ToolStarted(tool_kind="command", name="Bash", call_id="t1"),
        ToolStarted(tool_kind="file-edit", name="Write", call_id="t2"),
        ToolFinished(tool_kind="command", name="Bash", call_id="t1", ok=True),
        ToolFinished(tool_kind="file-edit", name="Write", call_id="t2", ok=True),
        FileChanged(path="/w/a.txt"),
        AssistantText(text="DONE"),
        UsageUpdated(
            usage=Usage(input_tokens=60, cached_input_tokens=20, output_tokens=4, cost_usd=0.5)
        ),
    ]


def test_command_text_only_when_the_host_opted_in() -> None:
    use = _use("t1", "Bash", command="echo hi")
    [without] = _map(use)
    [with_commands] = _map(use, include_commands=True)
    assert isinstance(without, ToolStarted)
    assert isinstance(with_commands, ToolStarted)
    assert without.command is None
    assert with_commands.command == "echo hi"
    # Only command tools carry it, whatever other tools call their arguments.
    [other] = _map(_use("t2", "Grep", command="not a command"), include_commands=True)
    assert isinstance(other, ToolStarted)
    assert other.command is None


@pytest.mark.parametrize(("is_error", "ok"), [(None, True), (False, True), (True, False)])
def test_only_an_explicit_is_error_fails_a_tool(is_error: bool | None, ok: bool) -> None:
    # The Messages API omits is_error on success (the CLI does so for Write): absent is ok.
    events = _map(_use("t", "Edit", file_path="/w/f"), _result("t", is_error=is_error))
    assert events[1] == ToolFinished(tool_kind="file-edit", name="Edit", call_id="t", ok=ok)
    assert (FileChanged(path="/w/f") in events) is ok


def test_a_result_for_an_unknown_call_reports_nothing() -> None:
    assert _map(_result("never-started")) == []


def test_tool_kinds() -> None:
    assert [
        tool_kind(name)
        for name in ("Bash", "NotebookEdit", "Read", "Grep", "WebFetch", "Agent", "mcp__s__t", "X")
    ] == ["command", "file-edit", "file-read", "search", "web", "agent", "mcp", "other"]


def test_server_tools_start_and_finish_without_a_verdict() -> None:
    events = _map(
        _assistant(
            ServerToolUseBlock(id="s1", name="web_search", input={"query": "q"}),
            ServerToolResultBlock(tool_use_id="s1", content={"type": "web_search_tool_result"}),
        )
    )
    assert events == [
        ToolStarted(tool_kind="web", name="web_search", call_id="s1"),
        ToolFinished(tool_kind="web", name="web_search", call_id="s1", ok=None),
    ]


def test_todo_write_states_the_whole_plan_once_it_succeeded() -> None:
    todos = [
        {"content": "read", "status": "completed", "activeForm": "reading"},
        {"content": "write", "status": "in_progress", "activeForm": "writing"},
    ]
    plan = PlanUpdated(
        steps=(
            PlanStep(text="read", status="completed"),
            PlanStep(text="write", status="in_progress"),
        )
    )
    assert _map(_use("t", "TodoWrite", todos=todos), _result("t"))[-1] == plan
    # A refused TodoWrite (the pinned CLI disables it) states no plan.
    refused = _map(_use("t", "TodoWrite", todos=todos), _result("t", is_error=True))
    assert not any(isinstance(event, PlanUpdated) for event in refused)


def test_task_tools_build_the_plan_from_what_the_product_stated() -> None:
    # The structured results are the pinned CLI's own (captured against the fixture).
    messages: list[Message] = [
        _use("c1", "TaskCreate", subject="one", description="d"),
        _result("c1", structured={"task": {"id": "1", "subject": "one", "description": "d"}}),
        _use("c2", "TaskCreate", subject="two", description="d"),
        _result("c2", structured={"task": {"id": "2", "subject": "two", "description": "d"}}),
        _use("u1", "TaskUpdate", taskId="1", status="in_progress"),
        _result(
            "u1",
            structured={
                "success": True,
                "taskId": "1",
                "updatedFields": ["status"],
                "statusChange": {"from": "pending", "to": "in_progress"},
            },
        ),
        _use("u2", "TaskUpdate", taskId="2", status="deleted"),
        _result(
            "u2",
            structured={
                "success": True,
                "taskId": "2",
                "statusChange": {"from": "pending", "to": "deleted"},
            },
        ),
        _use("l", "TaskList"),
        _result(
            "l",
            structured={
                "tasks": [
                    {"id": "1", "subject": "one", "status": "completed", "blockedBy": []},
                    {"id": "3", "subject": "three", "status": "pending", "blockedBy": []},
                ]
            },
        ),
    ]
    plans = [event.steps for event in _map(*messages) if isinstance(event, PlanUpdated)]
    assert plans == [
        (PlanStep(text="one"),),  # TaskCreate's result states no status: none is invented
        (PlanStep(text="one"), PlanStep(text="two")),
        (PlanStep(text="one", status="in_progress"), PlanStep(text="two")),
        (PlanStep(text="one", status="in_progress"),),
        (PlanStep(text="one", status="completed"), PlanStep(text="three", status="pending")),
    ]


def test_a_failed_task_update_changes_nothing() -> None:
    events = _map(
        _use("c", "TaskCreate", subject="one"),
        _result("c", structured={"task": {"id": "1", "subject": "one"}}),
        _use("u", "TaskUpdate", taskId="1", status="completed"),
        _result("u", structured={"success": False, "taskId": "1"}),
        _use("v", "TaskUpdate", taskId="9", status="completed"),
        _result("v", structured={"success": True, "taskId": "9", "statusChange": {"to": "x"}}),
    )
    assert [e for e in events if isinstance(e, PlanUpdated)] == [
        PlanUpdated(steps=(PlanStep(text="one"),))
    ]


def test_streamed_text_deltas_are_deltas() -> None:
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "pa"},
    }
    other = {
        "type": "content_block_delta",
        "delta": {"type": "input_json_delta", "partial_json": ""},
    }
    events = _map(
        StreamEvent(uuid="u", session_id="s", event=event),
        StreamEvent(uuid="v", session_id="s", event=other),
    )
    assert events == [AssistantText(text="pa", delta=True)]


def test_other_system_messages_and_plain_user_text_report_nothing() -> None:
    assert (
        _map(
            SystemMessage(subtype="permission_denied", data={}),
            UserMessage(content="the task"),
            _assistant(TextBlock(text="")),
        )
        == []
    )


# -- usage ----------------------------------------------------------------------------------


def test_per_model_totals_are_summed_and_preferred() -> None:
    message = _final(
        total_cost_usd=0.75,
        usage={"input_tokens": 1, "output_tokens": 1},
        model_usage={
            "claude-a": {
                "inputTokens": 100,
                "outputTokens": 10,
                "cacheReadInputTokens": 5,
                "cacheCreationInputTokens": 1,
                "thinkingTokens": 3,
                "costUSD": 0.5,
            },
            "claude-b": {
                "inputTokens": 200,
                "outputTokens": 20,
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
                "thinkingTokens": 0,
                "costUSD": 0.25,
            },
        },
    )
    assert usage_of(message) == Usage(
        input_tokens=306, cached_input_tokens=5, output_tokens=30, reasoning_tokens=3, cost_usd=0.75
    )


def test_an_error_result_with_zero_usage_takes_the_per_model_totals() -> None:
    # Observed with the pinned CLI: error_max_budget_usd reports usage zeros while its
    # modelUsage holds the real totals the cost was computed from.
    message = _final(
        subtype="error_max_budget_usd",
        is_error=True,
        total_cost_usd=1.00005,
        usage={"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
        model_usage={
            "claude-haiku-4-5": {
                "inputTokens": 1_000_000,
                "outputTokens": 10,
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
            }
        },
    )
    assert usage_of(message) == Usage(
        input_tokens=1_000_000, cached_input_tokens=0, output_tokens=10, cost_usd=1.00005
    )


def test_the_usage_field_is_the_fallback_with_its_thinking_tokens() -> None:
    message = _final(
        usage={
            "input_tokens": 7,
            "output_tokens": 9,
            "cache_read_input_tokens": 2,
            "output_tokens_details": {"thinking_tokens": 4},
        }
    )
    assert usage_of(message) == Usage(
        input_tokens=9, cached_input_tokens=2, output_tokens=9, reasoning_tokens=4
    )


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"usage": {"input_tokens": -1, "output_tokens": True}, "total_cost_usd": math.nan},
        {"usage": "not a mapping", "total_cost_usd": -0.1},
    ],
)
def test_nothing_stated_or_nothing_valid_is_no_usage(fields: dict[str, Any]) -> None:
    assert usage_of(_final(**fields)) is None
    assert _map(_final(**fields)) == []


def test_an_invalid_count_is_left_unreported_never_guessed() -> None:
    usage = usage_of(_final(usage={"input_tokens": 5, "output_tokens": "many"}))
    assert usage == Usage(input_tokens=5)


# -- bounds and robustness ------------------------------------------------------------------


def test_open_tool_calls_are_bounded_and_the_oldest_forgotten() -> None:
    starts = [_use(f"t{n}", "Read", file_path="/x") for n in range(MAX_OPEN_TOOL_CALLS + 1)]
    events = _map(*starts, _result("t0"), _result(f"t{MAX_OPEN_TOOL_CALLS}"))
    finished = [e.call_id for e in events if isinstance(e, ToolFinished)]
    assert finished == [f"t{MAX_OPEN_TOOL_CALLS}"]


def test_the_plan_is_bounded() -> None:
    todos = [{"content": str(n), "status": "pending"} for n in range(MAX_PLAN_STEPS + 5)]
    plan = _map(_use("t", "TodoWrite", todos=todos), _result("t"))[-1]
    assert isinstance(plan, PlanUpdated)
    assert len(plan.steps) == MAX_PLAN_STEPS


def test_a_malformed_message_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    broken = AssistantMessage(content=None, model="m")  # type: ignore[arg-type]
    caplog.set_level("DEBUG", logger="dsh_subagent_claude_code")
    assert _map(broken, _assistant(TextBlock(text="after"))) == [AssistantText(text="after")]
    assert "was not mapped" in caplog.text


def test_a_resumed_session_reports_the_querys_own_tokens_and_no_cost() -> None:
    # Observed with the pinned CLI on --resume: modelUsage and total_cost_usd are the
    # session's running totals, while usage is the query's own.
    message = _final(
        total_cost_usd=0.0012,
        usage={"input_tokens": 140, "output_tokens": 5},
        model_usage={"m": {"inputTokens": 240, "outputTokens": 12, "costUSD": 0.0012}},
    )
    assert usage_of(message, resumed=True) == Usage(
        input_tokens=140, cached_input_tokens=None, output_tokens=5, cost_usd=None
    )
    fresh = usage_of(message)
    assert fresh is not None
    assert fresh.input_tokens == 240  # a fresh session's totals are the run's
