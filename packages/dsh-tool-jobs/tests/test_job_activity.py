"""job_list shows a background subagent's elapsed time, tokens and last activity, safely.

The rule under test: progress carries product text (assistant text, command text, file
paths), and none of it may reach a model-facing text. What ``job_list`` may show is the
activity kind, the coarse tool kind and a plain-identifier tool name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import pytest
from dsh_subagent import (
    AssistantText,
    CancelController,
    FileChanged,
    ParentContext,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    SubagentService,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from dsh_subagent.tool_protocol import ToolCallContext
from dsh_tool_jobs import (
    ActivityTracker,
    BackgroundSubagentLauncher,
    JobActivity,
    JobRegistry,
    JobSnapshot,
    JobsToolsConfig,
    job_list,
    job_tools,
    notice_text,
    render_list,
)
from hypothesis import given
from hypothesis import strategies as st

SECRETS = {
    "command": "curl -H 'Authorization: Bearer sk-PLANTED-CMD-0f3a9' https://x",
    "text": "the key is sk-PLANTED-TEXT-77b1",
    "path": "/home/alice/.ssh/id_PLANTED-PATH-c0de",
    "title": "Run cat /etc/PLANTED-TITLE-aa11",  # a tool "name" that is really product text
}
MARK = "PLANTED"


def _tracked(events: list[ProgressEvent]) -> JobActivity:
    tracker = ActivityTracker()
    for event in events:
        tracker.observe(event)
    return tracker.snapshot()


def _snapshot(activity: JobActivity | None, *, finished: bool = False) -> JobSnapshot:
    return JobSnapshot(
        id="subagent-1",
        kind="subagent",
        label="review the diff",
        status="completed" if finished else "running",
        started_at=1_000,
        finished_at=13_000 if finished else None,
        reported=False,
        activity=activity,
    )


# -- the tracker and the line ------------------------------------------------------------


def test_the_tracker_keeps_the_kind_the_tool_and_the_tokens() -> None:
    usage = UsageUpdated(usage=Usage(input_tokens=1200, output_tokens=34))
    assert _tracked([]) == JobActivity()
    assert _tracked([TurnStarted(), usage]) == JobActivity(last="turn-started", tokens=1234)
    assert _tracked([usage, ToolStarted(tool_kind="command", name="Bash")]) == JobActivity(
        last="tool-started", tool_kind="command", tool="Bash", tokens=1234
    )
    assert _tracked([ToolFinished(tool_kind="mcp", name="mcp__github__search")]) == JobActivity(
        last="tool-finished", tool_kind="mcp", tool="mcp__github__search"
    )
    # An unknown kind is "other"; a name that is not a plain identifier is left out.
    assert _tracked([ToolStarted(tool_kind="shell!", name="Run ls -la")]) == JobActivity(
        last="tool-started", tool_kind="other"
    )
    assert _tracked([ToolStarted(tool_kind="web", name="x" * 65)]).tool is None
    assert _tracked([UsageUpdated(usage=Usage(output_tokens=9))]).tokens == 9


def test_job_list_line_of_a_running_and_a_finished_subagent() -> None:
    activity = JobActivity(last="tool-started", tool_kind="command", tool="Bash", tokens=1234)
    assert render_list([_snapshot(activity)], now_ms=126_000) == (
        "subagent-1 [subagent] running — review the diff "
        "(2m 05s, 1,234 tokens, last: tool-started command Bash)"
    )
    # Once finished: how long it took and the tokens; the last activity is history.
    assert render_list([_snapshot(activity, finished=True)], now_ms=999_999) == (
        "subagent-1 [subagent] completed — review the diff (12s, 1,234 tokens)"
    )
    assert render_list([_snapshot(JobActivity())], now_ms=1_500) == (
        "subagent-1 [subagent] running — review the diff (0s)"
    )
    # A producer without an activity (a shell job) keeps the plain line.
    assert render_list([_snapshot(None)], now_ms=5_000) == (
        "subagent-1 [subagent] running — review the diff"
    )


def test_the_completion_notice_stays_within_its_bound_and_shows_no_activity() -> None:
    activity = JobActivity(last="tool-started", tool_kind="command", tool="Bash", tokens=1234)
    finished = _snapshot(activity, finished=True)
    assert "tokens" not in notice_text(finished)
    for limit in (10, 40, 80, 200):
        bounded = finished.model_copy(update={"output_limit_bytes": limit})
        assert len(notice_text(bounded).encode()) <= limit


@given(
    command=st.text(),
    text=st.text(),
    path=st.text(),
    name=st.text(),
    kind=st.text(),
)
def test_product_text_never_changes_the_line(
    command: str, text: str, path: str, name: str, kind: str
) -> None:
    """Whatever the product said in text, commands and paths, job_list reads the same."""

    def events(c: str, t: str, p: str) -> list[ProgressEvent]:
        return [
            AssistantText(text=t, delta=True),
            ToolStarted(tool_kind=kind, name=name, command=c),
            FileChanged(path=p),
            ToolStarted(tool_kind=kind, name=name, command=c),
            AssistantText(text=t),
        ]

    planted = render_list([_snapshot(_tracked(events(command, text, path)))], now_ms=9_000)
    neutral = render_list([_snapshot(_tracked(events("", "", "")))], now_ms=9_000)
    assert planted == neutral
    assert "\n" not in planted


# -- end to end through the subagent tool and the job controls --------------------------


@dataclass
class _Jobs:
    provider: ScriptedProvider
    registry: JobRegistry
    tool: SubagentTool
    notices: list[str]
    noticed: anyio.Event
    parent: ParentContext

    def context(self) -> ToolCallContext:
        return ToolCallContext(self.parent, CancelController().signal)


@asynccontextmanager
async def _jobs(script: Script) -> AsyncIterator[_Jobs]:
    provider = ScriptedProvider("scripted", (script,))
    notices: list[str] = []
    noticed = anyio.Event()

    def sink(_owner: ParentContext, text: str) -> None:
        notices.append(text)
        noticed.set()

    async with SubagentService() as service:
        service.register_provider(provider)
        async with JobRegistry(notice_sink=sink) as registry:
            tool = SubagentTool(
                service,
                SubagentToolConfig(provider="scripted", max_depth="provider-managed"),
                BackgroundSubagentLauncher(registry, service),
            )
            yield _Jobs(provider, registry, tool, notices, noticed, ParentContext(session_id="p"))


@pytest.mark.anyio
async def test_planted_secrets_in_progress_never_reach_job_list_or_the_notice() -> None:
    gate = anyio.Event()
    script = dataclasses.replace(Script.answer("final answer"), hold_result=gate)
    async with _jobs(script) as jobs:
        started = await jobs.tool.call(
            {"description": "review", "prompt": "do it", "run_in_background": True},
            jobs.context(),
        )
        assert not started.is_error
        await jobs.provider.wait_attempts()
        handle = jobs.provider.records[0].handle
        assert handle is not None
        events: list[ProgressEvent] = [
            TurnStarted(),
            AssistantText(text=SECRETS["text"], delta=True),
            ToolStarted(tool_kind="command", name="Bash", command=SECRETS["command"]),
            FileChanged(path=SECRETS["path"]),
            PlanUpdated(steps=(PlanStep(text=SECRETS["text"]),)),
            UsageUpdated(usage=Usage(input_tokens=100, output_tokens=20)),
            ToolStarted(tool_kind="command", name=SECRETS["title"], command=SECRETS["command"]),
        ]
        for event in events:
            handle.progress.emit(event)
        tools = {tool.name: tool for tool in job_tools(jobs.registry, JobsToolsConfig())}
        listed = await tools["job_list"].call({}, jobs.context())
        value = job_list(jobs.registry, {}, jobs.parent).value
        gate.set()
        await jobs.noticed.wait()
        finished = await tools["job_list"].call({}, jobs.context())
    assert listed.text.startswith("subagent-1 [subagent] running — review (")
    assert listed.text.endswith(", 120 tokens, last: tool-started command)")
    assert value == [
        {
            "id": "subagent-1",
            "kind": "subagent",
            "label": "review",
            "status": "running",
            "started_at": value[0]["started_at"],  # type: ignore[index,call-overload]
            "activity": {"last": "tool-started", "tool_kind": "command", "tokens": 120},
        }
    ]
    assert finished.text.endswith(", 120 tokens)")
    for text in (listed.text, json.dumps(value), finished.text, *jobs.notices):
        assert MARK not in text
