"""Progress and usage from an ACP agent's session updates (mapping, pairing, bounds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp.schema import SessionNotification
from acp.schema import Usage as AcpUsage
from acp_harness import Scripted, delegate_with_progress
from dsh_subagent import (
    COMPLETED,
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent_acp.progress import MAX_OPEN_TOOL_CALLS, AcpProgress


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


COMMAND = "rm -rf planted-command-text"


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def tool_call(
    call_id: str, kind: str | None, *, status: str = "in_progress", **extra: Any
) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": COMMAND, **extra}
    if kind is not None:
        update["kind"] = kind
    return {**update, "status": status}


def tool_update(call_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status, **extra}


def diff(path: str) -> dict[str, Any]:
    return {"type": "diff", "path": path, "newText": "hi\n"}


def plan(*entries: tuple[str, str]) -> dict[str, Any]:
    return {
        "sessionUpdate": "plan",
        "entries": [{"content": c, "status": s, "priority": "medium"} for c, s in entries],
    }


def usage_update(amount: float | None, currency: str = "USD") -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": 15, "size": 258400}
    if amount is not None:
        update["cost"] = {"amount": amount, "currency": currency}
    return update


def _events(*updates: dict[str, Any], include_commands: bool = False) -> list[ProgressEvent]:
    events: list[ProgressEvent] = []
    progress = AcpProgress(events.append, include_commands=include_commands)
    for update in updates:
        notification = SessionNotification.model_validate({"sessionId": "s", "update": update})
        progress.on_update(notification.update)
    return events


def test_message_chunks_are_streamed_text() -> None:
    thought = {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}}
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    picture = {"sessionUpdate": "agent_message_chunk", "content": image}
    assert _events(chunk("the "), thought, picture, chunk(""), chunk("answer")) == [
        AssistantText(text="the ", delta=True),
        AssistantText(text="answer", delta=True),
    ]


def test_an_execute_call_pairs_start_and_finish_by_id() -> None:
    assert _events(
        tool_call("c1", "execute"),
        tool_update("c1", "in_progress"),
        tool_update("c1", "completed", rawOutput={"stdout": "out"}),
        tool_call("c2", "execute"),
        tool_update("c2", "failed"),
    ) == [
        ToolStarted(tool_kind="command", name="execute", call_id="c1"),
        ToolFinished(tool_kind="command", name="execute", call_id="c1", ok=True),
        ToolStarted(tool_kind="command", name="execute", call_id="c2"),
        ToolFinished(tool_kind="command", name="execute", call_id="c2", ok=False),
    ]


def test_the_title_is_the_command_only_with_the_opt_in_and_never_a_name() -> None:
    without = _events(tool_call("c1", "execute"), tool_call("c2", "read"))
    with_text = _events(tool_call("c1", "execute"), tool_call("c2", "read"), include_commands=True)
    assert not [e for e in without if COMMAND in e.model_dump_json()]
    assert with_text == [
        ToolStarted(tool_kind="command", name="execute", call_id="c1", command=COMMAND),
        ToolStarted(tool_kind="file-read", name="read", call_id="c2"),  # not a command
    ]


def test_a_completed_edit_reports_each_changed_path_once() -> None:
    start = tool_call("e1", "edit", content=[diff("/w/a.txt")], locations=[{"path": "/w/a.txt"}])
    assert _events(
        start, tool_update("e1", "completed", content=[diff("/w/a.txt"), diff("/w/b.txt")])
    ) == [
        ToolStarted(tool_kind="file-edit", name="edit", call_id="e1"),
        ToolFinished(tool_kind="file-edit", name="edit", call_id="e1", ok=True),
        FileChanged(path="/w/a.txt"),
        FileChanged(path="/w/b.txt"),
    ]
    # The start's diffs count when the finish carries none; a failed edit changed nothing.
    assert _events(start, tool_update("e1", "completed"))[-1] == FileChanged(path="/w/a.txt")
    assert FileChanged(path="/w/a.txt") not in _events(start, tool_update("e1", "failed"))


def test_kinds_map_to_the_neutral_vocabulary() -> None:
    kinds = ["read", "edit", "delete", "move", "search", "execute", "think", "fetch", None]
    starts = _events(*(tool_call(f"k{i}", kind) for i, kind in enumerate(kinds)))
    assert [(e.tool_kind, e.name) for e in starts if isinstance(e, ToolStarted)] == [
        ("file-read", "read"),
        ("file-edit", "edit"),
        ("file-edit", "delete"),
        ("file-edit", "move"),
        ("search", "search"),
        ("command", "execute"),
        ("other", "think"),
        ("web", "fetch"),
        ("other", "other"),
    ]


def test_a_call_started_finished_and_an_unknown_finish_are_reported() -> None:
    assert _events(
        tool_call("done", "search", status="completed"),
        tool_update("never-started", "failed", kind="fetch"),
        tool_update("never-started-either", "in_progress"),
    ) == [
        ToolStarted(tool_kind="search", name="search", call_id="done"),
        ToolFinished(tool_kind="search", name="search", call_id="done", ok=True),
        ToolFinished(tool_kind="web", name="fetch", call_id="never-started", ok=False),
    ]


def test_open_calls_are_bounded_and_the_oldest_forgotten() -> None:
    starts = [tool_call(f"c{n}", "execute") for n in range(MAX_OPEN_TOOL_CALLS + 1)]
    events = _events(*starts, tool_update("c0", "completed"), tool_update("c1", "completed"))
    assert events[-2:] == [
        ToolFinished(tool_kind="other", name="other", call_id="c0", ok=True),  # forgotten
        ToolFinished(tool_kind="command", name="execute", call_id="c1", ok=True),
    ]


def test_plans_replace_the_whole_plan() -> None:
    items = {
        "sessionUpdate": "plan_update",
        "plan": {
            "type": "items",
            "planId": "p",
            "entries": [{"content": "b", "status": "pending", "priority": "low"}],
        },
    }
    markdown = {
        "sessionUpdate": "plan_update",
        "plan": {"type": "markdown", "planId": "m", "content": "# x"},
    }
    assert _events(plan(("a", "completed"), ("b", "in_progress")), items, markdown) == [
        PlanUpdated(
            steps=(PlanStep(text="a", status="completed"), PlanStep(text="b", status="in_progress"))
        ),
        PlanUpdated(steps=(PlanStep(text="b", status="pending"),)),
    ]


def test_usage_tokens_come_from_the_prompt_answer_and_cost_from_usd_updates() -> None:
    events: list[ProgressEvent] = []
    progress = AcpProgress(events.append, include_commands=False)
    for update in (usage_update(None), usage_update(0.25, "EUR"), usage_update(0.125)):
        notification = SessionNotification.model_validate({"sessionId": "s", "update": update})
        progress.on_update(notification.update)
    progress.on_prompt_usage(None)
    stated = AcpUsage.model_validate(
        {
            "totalTokens": 999,
            "inputTokens": 700,
            "outputTokens": 90,
            "cachedReadTokens": 500,
            "thoughtTokens": 20,
        }
    )
    progress.on_prompt_usage(stated)
    final = Usage(
        input_tokens=700,
        cached_input_tokens=500,
        output_tokens=90,
        reasoning_tokens=20,
        cost_usd=0.125,
    )
    # The context-window figures (used/size) and a non-USD cost are no usage of ours.
    assert events == [UsageUpdated(usage=Usage(cost_usd=0.125)), UsageUpdated(usage=final)]
    assert progress.usage == final


# -- through the provider, against the scripted agent -------------------------------------


@pytest.mark.anyio
async def test_a_scripted_turn_reports_its_progress_and_usage(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {
            "prompt": [
                {"update": plan(("run it", "in_progress"))},
                {"update": tool_call("c1", "execute")},
                {"update": tool_update("c1", "completed")},
                {"update": usage_update(0.5)},
                {"chunk": "FAKE-"},
                {"chunk": "ANSWER"},
            ],
            "usage": {"totalTokens": 150, "inputTokens": 120, "outputTokens": 30},
        },
    )
    result, events = await delegate_with_progress(
        agent.provider(), cwd=str(agent.workspace), progress_commands=True
    )
    final = Usage(input_tokens=120, output_tokens=30, cost_usd=0.5)
    assert events == [
        PlanUpdated(steps=(PlanStep(text="run it", status="in_progress"),)),
        ToolStarted(tool_kind="command", name="execute", call_id="c1", command=COMMAND),
        ToolFinished(tool_kind="command", name="execute", call_id="c1", ok=True),
        UsageUpdated(usage=Usage(cost_usd=0.5)),
        AssistantText(text="FAKE-", delta=True),
        AssistantText(text="ANSWER", delta=True),
        UsageUpdated(usage=final),
    ]
    assert (result.stop_reason, result.text, result.usage) == (COMPLETED, "FAKE-ANSWER", final)


@pytest.mark.anyio
async def test_updates_of_another_session_are_no_progress(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"foreign_chunk": "OTHER"}, {"chunk": "mine"}]})
    result, events = await delegate_with_progress(agent.provider(), cwd=str(agent.workspace))
    assert events == [AssistantText(text="mine", delta=True)]
    assert result.usage is None  # the agent reported none
