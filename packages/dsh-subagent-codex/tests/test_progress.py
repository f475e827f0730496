"""Progress and usage from the app-server's turn notifications (mapping, order, bounds).

Every example notification here is checked against the pinned binary's generated schema,
so the mapping reads fields the product really sends.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from codex_harness import (
    SCHEMA_DIR,
    THREAD,
    TURN,
    FakeCodex,
    Step,
    agent_message,
    delegate_with_progress,
    failed,
    handshake,
    notify,
    terminal,
    turn_start,
)
from dsh_subagent import (
    COMPLETED,
    ERROR,
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
from dsh_subagent_codex.progress import PROGRESS_METHODS, TOOL_KINDS, RunUsage, progress_events
from dsh_subagent_codex.turn import MAX_EARLY_PROGRESS

pytestmark = pytest.mark.anyio

COMMAND = "printf planted-command-text > out.txt"


def _scoped(params: dict[str, Any], *, turn: str = TURN) -> dict[str, Any]:
    return {"threadId": THREAD, "turnId": turn, **params}


def command_item(status: str, *, item_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "commandExecution",
        "id": item_id,
        "command": COMMAND,
        "commandActions": [{"type": "unknown", "command": COMMAND}],
        "cwd": "/work",
        "status": status,
        "aggregatedOutput": None if status == "inProgress" else "output text\n",
        "exitCode": None if status == "inProgress" else (0 if status == "completed" else 1),
        "durationMs": None,
        "processId": None,
    }


def file_item(status: str, *paths: str, item_id: str = "call_2") -> dict[str, Any]:
    changes = [{"path": path, "kind": {"type": "add"}, "diff": "hi\n"} for path in paths]
    return {"type": "fileChange", "id": item_id, "changes": changes, "status": status}


def mcp_item(status: str) -> dict[str, Any]:
    return {
        "type": "mcpToolCall",
        "id": "mcp_1",
        "server": "docs",
        "tool": "lookup",
        "arguments": {"q": "x"},
        "status": status,
    }


def dynamic_item(success: bool | None) -> dict[str, Any]:
    status = "inProgress" if success is None else "completed"
    return {
        "type": "dynamicToolCall",
        "id": "dyn_1",
        "tool": "host_tool",
        "arguments": {},
        "status": status,
        "success": success,
    }


def web_item() -> dict[str, Any]:
    return {"type": "webSearch", "id": "ws_1", "query": "anyio cancel scopes"}


def reasoning_item() -> dict[str, Any]:
    return {"type": "reasoning", "id": "r_1", "summary": [], "content": []}


def message_item(text: str, phase: str | None = "final_answer") -> dict[str, Any]:
    return {"type": "agentMessage", "id": "msg_1", "text": text, "phase": phase}


def started(item: dict[str, Any], *, turn: str = TURN) -> tuple[str, dict[str, Any]]:
    return "item/started", _scoped({"item": item, "startedAtMs": 1}, turn=turn)


def completed(item: dict[str, Any], *, turn: str = TURN) -> tuple[str, dict[str, Any]]:
    return "item/completed", _scoped({"item": item, "completedAtMs": 1}, turn=turn)


def delta(text: str, *, turn: str = TURN) -> tuple[str, dict[str, Any]]:
    return "item/agentMessage/delta", _scoped({"itemId": "msg_1", "delta": text}, turn=turn)


def plan(*steps: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    entries = [{"step": step, "status": status} for step, status in steps]
    return "turn/plan/updated", _scoped({"explanation": None, "plan": entries})


def token_usage(
    inputs: int, cached: int, outputs: int, reasoning: int
) -> tuple[str, dict[str, Any]]:
    total = {
        "totalTokens": inputs + outputs,
        "inputTokens": inputs,
        "cachedInputTokens": cached,
        "cacheWriteInputTokens": 0,
        "outputTokens": outputs,
        "reasoningOutputTokens": reasoning,
    }
    last = {**total, "totalTokens": 1, "inputTokens": 1, "outputTokens": 0}
    usage = {"total": total, "last": last, "modelContextWindow": 258400}
    return "thread/tokenUsage/updated", _scoped({"tokenUsage": usage})


def turn_started(turn: str = TURN) -> tuple[str, dict[str, Any]]:
    return "turn/started", {
        "threadId": THREAD,
        "turn": {"id": turn, "items": [], "status": "inProgress"},
    }


def send(notification: tuple[str, dict[str, Any]]) -> Step:
    return notify(*notification)


EXAMPLES: list[tuple[str, tuple[str, dict[str, Any]], list[ProgressEvent]]] = [
    (
        "command started",
        started(command_item("inProgress")),
        [ToolStarted(tool_kind="command", name="commandExecution", call_id="call_1")],
    ),
    (
        "command completed",
        completed(command_item("completed")),
        [ToolFinished(tool_kind="command", name="commandExecution", call_id="call_1", ok=True)],
    ),
    (
        "command failed",
        completed(command_item("failed")),
        [ToolFinished(tool_kind="command", name="commandExecution", call_id="call_1", ok=False)],
    ),
    (
        "command declined",
        completed(command_item("declined")),
        [ToolFinished(tool_kind="command", name="commandExecution", call_id="call_1", ok=False)],
    ),
    (
        "file change started",
        started(file_item("inProgress", "/w/a.txt")),
        [ToolStarted(tool_kind="file-edit", name="fileChange", call_id="call_2")],
    ),
    (
        "file change completed",
        completed(file_item("completed", "/w/a.txt", "/w/b.txt")),
        [
            ToolFinished(tool_kind="file-edit", name="fileChange", call_id="call_2", ok=True),
            FileChanged(path="/w/a.txt"),
            FileChanged(path="/w/b.txt"),
        ],
    ),
    (
        "declined file change changes nothing",
        completed(file_item("declined", "/w/a.txt")),
        [ToolFinished(tool_kind="file-edit", name="fileChange", call_id="call_2", ok=False)],
    ),
    (
        "mcp tool",
        completed(mcp_item("failed")),
        [ToolFinished(tool_kind="mcp", name="lookup", call_id="mcp_1", ok=False)],
    ),
    (
        "dynamic tool says success",
        completed(dynamic_item(True)),
        [ToolFinished(tool_kind="other", name="host_tool", call_id="dyn_1", ok=True)],
    ),
    (
        "web search has no status",
        completed(web_item()),
        [ToolFinished(tool_kind="web", name="webSearch", call_id="ws_1", ok=None)],
    ),
    ("reasoning is no progress", completed(reasoning_item()), []),
    ("a message start says nothing yet", started(message_item("")), []),
    (
        "whole message",
        completed(message_item("the answer\n")),
        [AssistantText(text="the answer\n")],
    ),
    (
        "commentary is assistant text too",
        completed(message_item("looking", "commentary")),
        [AssistantText(text="looking")],
    ),
    ("message delta", delta("the ans"), [AssistantText(text="the ans", delta=True)]),
    ("empty delta", delta(""), []),
    (
        "plan",
        plan(("read the code", "completed"), ("fix it", "inProgress")),
        [
            PlanUpdated(
                steps=(
                    PlanStep(text="read the code", status="completed"),
                    PlanStep(text="fix it", status="inProgress"),
                )
            )
        ],
    ),
    (
        "usage is the thread total",
        token_usage(2700, 2100, 120, 40),
        [
            UsageUpdated(
                usage=Usage(
                    input_tokens=2700,
                    cached_input_tokens=2100,
                    output_tokens=120,
                    reasoning_tokens=40,
                )
            )
        ],
    ),
]


@functools.cache
def _notification_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / "ServerNotification.json").read_text())
    return schema


@pytest.mark.parametrize(
    "notification",
    [example[1] for example in EXAMPLES] + [turn_started()],
    ids=[example[0] for example in EXAMPLES] + ["turn started"],
)
def test_every_example_is_a_notification_of_the_pinned_schema(
    notification: tuple[str, dict[str, Any]],
) -> None:
    method, params = notification
    jsonschema.validate({"method": method, "params": params}, _notification_schema())


@pytest.mark.parametrize(
    ("notification", "expected"),
    [example[1:] for example in EXAMPLES],
    ids=[example[0] for example in EXAMPLES],
)
def test_mapping(notification: tuple[str, dict[str, Any]], expected: list[ProgressEvent]) -> None:
    assert list(progress_events(*notification, include_commands=False)) == expected


def test_the_command_text_travels_only_when_the_host_opted_in() -> None:
    notification = started(command_item("inProgress"))
    without = progress_events(*notification, include_commands=False)
    with_text = progress_events(*notification, include_commands=True)
    expected = ToolStarted(tool_kind="command", name="commandExecution", call_id="call_1")
    assert without == (expected,)
    assert with_text == (expected.model_copy(update={"command": COMMAND}),)
    assert COMMAND not in repr(without)


def test_the_tool_kinds_cover_the_schemas_tool_items() -> None:
    items = _notification_schema()["definitions"]["ThreadItem"]["oneOf"]
    types = {item["properties"]["type"]["enum"][0] for item in items}
    assert set(TOOL_KINDS) <= types
    methods = {
        entry["properties"]["method"]["enum"][0] for entry in _notification_schema()["oneOf"]
    }
    assert methods >= PROGRESS_METHODS


@pytest.mark.parametrize(
    "notification",
    [
        ("thread/tokenUsage/updated", _scoped({"tokenUsage": {"total": {"inputTokens": "many"}}})),
        ("thread/tokenUsage/updated", _scoped({"tokenUsage": None})),
        token_usage(-1, 0, 1, 0),
        ("turn/plan/updated", _scoped({"plan": [{"step": 3}]})),
        ("item/agentMessage/delta", _scoped({"delta": None})),
        ("item/started", _scoped({"item": {"type": "commandExecution", "id": 7}})),
        ("item/started", _scoped({})),
    ],
)
def test_a_malformed_progress_notification_yields_nothing(
    notification: tuple[str, dict[str, Any]],
) -> None:
    assert progress_events(*notification, include_commands=True) == ()


# -- through the provider, against the scripted fake app-server ---------------------------


async def test_the_run_reports_its_turn_in_frame_order_with_the_final_usage(
    fake: FakeCodex,
) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        send(turn_started()),
        send(started(command_item("inProgress"))),
        send(completed(command_item("completed"))),
        send(token_usage(100, 0, 20, 0)),
        send(plan(("answer", "inProgress"))),
        send(delta("the ")),
        send(delta("answer")),
        agent_message("the answer", "final_answer"),
        send(token_usage(250, 90, 50, 7)),
        terminal(),
    ]
    result, events = await delegate_with_progress(fake.provider(steps), fake.workspace)
    final = Usage(input_tokens=250, cached_input_tokens=90, output_tokens=50, reasoning_tokens=7)
    assert events == [
        TurnStarted(),
        ToolStarted(tool_kind="command", name="commandExecution", call_id="call_1"),
        ToolFinished(tool_kind="command", name="commandExecution", call_id="call_1", ok=True),
        UsageUpdated(
            usage=Usage(
                input_tokens=100, cached_input_tokens=0, output_tokens=20, reasoning_tokens=0
            )
        ),
        PlanUpdated(steps=(PlanStep(text="answer", status="inProgress"),)),
        AssistantText(text="the ", delta=True),
        AssistantText(text="answer", delta=True),
        AssistantText(text="the answer"),
        UsageUpdated(usage=final),
    ]
    assert (result.stop_reason, result.text, result.usage) == (COMPLETED, "the answer", final)


async def test_frames_before_the_turn_is_committed_keep_their_order_and_other_turns_are_dropped(
    fake: FakeCodex,
) -> None:
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        send(turn_started()),
        send(delta("early ")),
        agent_message("early answer", "final_answer"),
        send(delta("from another turn", turn="turn-other")),
        {"op": "reply", "result": {"turn": {"id": TURN, "status": "inProgress", "items": []}}},
        send(delta("late", turn="turn-other")),
        send(token_usage(5, 0, 1, 0)),
        terminal(),
    ]
    result, events = await delegate_with_progress(fake.provider(steps), fake.workspace)
    assert events == [
        TurnStarted(),
        AssistantText(text="early ", delta=True),
        AssistantText(text="early answer"),
        UsageUpdated(
            usage=Usage(input_tokens=5, cached_input_tokens=0, output_tokens=1, reasoning_tokens=0)
        ),
    ]
    assert result.text == "early answer"


async def test_early_progress_is_bounded(fake: FakeCodex) -> None:
    flood = [delta(f"{n} ") for n in range(MAX_EARLY_PROGRESS + 40)]
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        {"op": "send_many", "frames": [{"method": m, "params": p} for m, p in flood]},
        {"op": "reply", "result": {"turn": {"id": TURN, "status": "inProgress", "items": []}}},
        agent_message("done", "final_answer"),
        terminal(),
    ]
    result, events = await delegate_with_progress(fake.provider(steps), fake.workspace)
    deltas = [e for e in events if isinstance(e, AssistantText) and e.delta]
    assert [e.text for e in deltas] == [f"{n} " for n in range(MAX_EARLY_PROGRESS)]
    assert result.text == "done"


async def test_a_malformed_progress_notification_never_fails_the_run(fake: FakeCodex) -> None:
    # Deliberate: progress is for the host's display and never decides the outcome, so a
    # progress-only notification of an unexpected shape is dropped instead of failing.
    steps = [
        *handshake(),
        *turn_start(),
        notify("thread/tokenUsage/updated", _scoped({"tokenUsage": {"total": "lots"}})),
        notify("item/started", _scoped({"item": {"type": "commandExecution", "id": []}})),
        agent_message("still answered", "final_answer"),
        terminal(),
    ]
    result, events = await delegate_with_progress(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text, result.usage) == (COMPLETED, "still answered", None)
    assert events == [AssistantText(text="still answered")]


async def test_opted_in_command_text_reaches_progress_and_nothing_else(
    fake: FakeCodex, tmp_path: Path
) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        send(started(command_item("inProgress"))),
        send(completed(command_item("completed"))),
        agent_message("ok", "final_answer"),
        terminal(),
    ]
    result, events = await delegate_with_progress(
        fake.provider(steps), fake.workspace, progress_commands=True
    )
    (start,) = [e for e in events if isinstance(e, ToolStarted)]
    assert start.command == COMMAND
    assert COMMAND not in result.model_dump_json()


async def test_a_failed_turn_keeps_the_usage_reported_before_it_failed(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        send(token_usage(40, 10, 4, 1)),
        failed("serverOverloaded"),
    ]
    result, events = await delegate_with_progress(fake.provider(steps), fake.workspace)
    usage = Usage(input_tokens=40, cached_input_tokens=10, output_tokens=4, reasoning_tokens=1)
    assert (result.stop_reason, result.usage) == (ERROR, usage)
    assert events == [UsageUpdated(usage=usage)]


def test_a_resumed_threads_usage_is_the_runs_own_share_of_the_total() -> None:
    """The first update of a resumed turn fixes what the thread had used before it."""
    run = RunUsage()

    def update(total: tuple[int, int, int, int], last: tuple[int, int, int, int]) -> Usage:
        names = ("inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
        params = _scoped(
            {
                "tokenUsage": {
                    "total": dict(zip(names, total, strict=True)),
                    "last": dict(zip(names, last, strict=True)),
                }
            }
        )
        (event,) = progress_events(
            "thread/tokenUsage/updated", params, include_commands=False, usage=run
        )
        assert isinstance(event, UsageUpdated)
        return event.usage

    first = update((240, 50, 12, 2), (140, 30, 5, 1))
    assert (first.input_tokens, first.cached_input_tokens, first.output_tokens) == (140, 30, 5)
    assert first.reasoning_tokens == 1
    second = update((400, 60, 20, 2), (160, 10, 8, 0))
    assert (second.input_tokens, second.output_tokens) == (300, 13)
