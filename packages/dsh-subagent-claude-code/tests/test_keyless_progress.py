"""Keyless real-product tier: progress, usage and budgets of the bundled Claude Code CLI.

The CLI runs against the loopback Messages fixture with scripted turns and exact usage
numbers; each test has its own temporary HOME, CLAUDE_CONFIG_DIR, XDG dirs and TMPDIR.
The budget tests wait for their bound to fire (an event), never assert how fast; the
bounds are a few seconds so the CLI's own startup (about half a second here) never
trips them on a loaded machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from dsh_contract_tests.fixtures.messages import (
    Hold,
    KeylessClaudeHome,
    MessagesFixture,
    StallMidStream,
    TextAnswer,
    TokenUsage,
    ToolUse,
    Turn,
    keyless_claude_home,
)
from dsh_subagent import (
    ERROR,
    AssistantText,
    Budget,
    FileChanged,
    ParentContext,
    PlanStep,
    PlanUpdated,
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
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subprocess.testing import ProcessWatch, SeenProcess

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

TASK = "Work through the scripted steps."
MODEL = "claude-haiku-4-5"
"""Priced by the pinned CLI at $1/M input, $5/M output, $0.10/M cache reads and $1.25/M
cache writes, and one of the models it enables its Task* plan tools for."""

LINE = "Product subagent failure (product: Claude Code; stage: query-run; category: {})"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the real-product tier runs once, like test_keyless.py


def _config(home: KeylessClaudeHome, **fields: Any) -> ClaudeCodeConfig:
    env = dict(home.env)
    if os.geteuid() == 0:
        # The CLI refuses bypassPermissions as root unless told it runs in a sandbox.
        env["IS_SANDBOX"] = "1"
    return ClaudeCodeConfig(env=env, model=MODEL, permission_mode="bypassPermissions", **fields)


async def _run(
    config: ClaudeCodeConfig,
    cwd: Path,
    *,
    budget: Budget | None = None,
    commands: bool = False,
) -> tuple[list[ProgressEvent], SubagentResult, list[str]]:
    """One delegation; its progress, its result and the processes alive at the result."""
    request = SubagentStartRequest(
        prompt=(TextBlock(text=TASK),),
        parent=ParentContext(session_id="parent", cwd=str(cwd)),
        budget=budget,
        progress_commands=commands,
    )
    with ProcessWatch() as watch:
        async with SubagentService() as service:
            service.register_provider(ClaudeCodeProvider(config))
            run = await service.start("claude-code", request)
            with anyio.fail_after(120):
                events = [event async for event in run.progress]
                result = await run.result()
            # The result waited for the product's exit and for its guard's (the CLI leaves
            # nothing behind): nothing the run started is alive now.
            alive = [_described(seen) for seen in watch.alive()]
            await run.dispose()
    return events, result, alive


def _described(seen: SeenProcess) -> str:
    try:
        parent = seen.process.ppid()
    except psutil.Error:
        return str(seen)
    return f"{seen} (parent {parent})"


def _assert_subsequence(expected: Sequence[ProgressEvent], events: Sequence[ProgressEvent]) -> None:
    remaining = iter(events)
    missing = [event for event in expected if not any(event == seen for seen in remaining)]
    assert not missing, f"not in order in {events!r}: {missing!r}"


def _cost(usage: TokenUsage) -> float:
    return (
        usage.input_tokens * 1.0
        + usage.output_tokens * 5.0
        + usage.cache_read_input_tokens * 0.10
        + usage.cache_creation_input_tokens * 1.25
    ) / 1_000_000


async def test_scripted_turns_give_the_exact_progress_sequence_and_usage(tmp_path: Path) -> None:
    usages = [
        TokenUsage(100, 20, cache_read_input_tokens=30, cache_creation_input_tokens=40),
        TokenUsage(200, 10, cache_read_input_tokens=50, thinking_tokens=4),
        TokenUsage(300, 5),
        TokenUsage(400, 6, cache_read_input_tokens=60),
        TokenUsage(500, 7),
        TokenUsage(600, 8, cache_read_input_tokens=70, cache_creation_input_tokens=9),
    ]
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        written = home.workspace / "out.txt"
        missing = home.workspace / "missing.txt"
        fixture.enqueue(
            Turn(
                (
                    TextAnswer("Looking around."),
                    ToolUse("Bash", {"command": "echo progress-ok"}, "toolu_bash"),
                ),
                usage=usages[0],
            ),
            ToolUse(
                "Write", {"file_path": str(written), "content": "x\n"}, "toolu_write", usages[1]
            ),
            ToolUse("Read", {"file_path": str(missing)}, "toolu_read", usages[2]),
            ToolUse(
                "TaskCreate", {"subject": "ship it", "description": "d"}, "toolu_plan", usages[3]
            ),
            ToolUse("TaskUpdate", {"taskId": "1", "status": "completed"}, "toolu_done", usages[4]),
            TextAnswer("ALL DONE", usages[5]),
        )
        events, result, alive = await _run(_config(home), home.workspace, commands=True)
        requests = fixture.message_requests()
    print("\nprogress:", *[event.model_dump(exclude_none=True) for event in events], sep="\n  ")
    assert result.stop_reason == "completed", result.diagnostic
    assert result.text == "ALL DONE"
    assert len(requests) == len(usages)
    assert written.read_text(encoding="utf-8") == "x\n"
    assert alive == []
    _assert_subsequence(
        [
            TurnStarted(),
            AssistantText(text="Looking around."),
            ToolStarted(
                tool_kind="command", name="Bash", call_id="toolu_bash", command="echo progress-ok"
            ),
            ToolFinished(tool_kind="command", name="Bash", call_id="toolu_bash", ok=True),
            ToolStarted(tool_kind="file-edit", name="Write", call_id="toolu_write"),
            ToolFinished(tool_kind="file-edit", name="Write", call_id="toolu_write", ok=True),
            FileChanged(path=str(written)),
            ToolStarted(tool_kind="file-read", name="Read", call_id="toolu_read"),
            ToolFinished(tool_kind="file-read", name="Read", call_id="toolu_read", ok=False),
            ToolStarted(tool_kind="other", name="TaskCreate", call_id="toolu_plan"),
            ToolFinished(tool_kind="other", name="TaskCreate", call_id="toolu_plan", ok=True),
            PlanUpdated(steps=(PlanStep(text="ship it"),)),
            ToolStarted(tool_kind="other", name="TaskUpdate", call_id="toolu_done"),
            ToolFinished(tool_kind="other", name="TaskUpdate", call_id="toolu_done", ok=True),
            PlanUpdated(steps=(PlanStep(text="ship it", status="completed"),)),
            AssistantText(text="ALL DONE"),
        ],
        events,
    )
    # Input counts cached prompt tokens in; the cost is the CLI's own total_cost_usd.
    assert result.usage is not None
    assert events[-1] == UsageUpdated(usage=result.usage)
    assert result.usage.model_dump(exclude={"cost_usd"}) == {
        "input_tokens": 2100 + 210 + 49,
        "cached_input_tokens": 210,
        "output_tokens": 56,
        "reasoning_tokens": 4,
    }
    assert result.usage.input_tokens == sum(
        u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens for u in usages
    )
    assert result.usage.cost_usd == pytest.approx(sum(_cost(u) for u in usages), rel=1e-9)


# A tool that records its pid, then sleeps in the CLI's tree until it is ended.
_SLEEPER = "echo $$ > {pidfile}; exec sleep 300"


def _assert_gone(pidfile: Path) -> None:
    pid = int(pidfile.read_text(encoding="utf-8"))
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    assert process.status() == psutil.STATUS_ZOMBIE, f"tool {pid} survived the run"


async def test_a_deadline_mid_tool_settles_with_its_line_and_no_survivor(tmp_path: Path) -> None:
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        pidfile = home.workspace / "tool.pid"  # the cwd: writable under confinement
        fixture.enqueue(ToolUse("Bash", {"command": _SLEEPER.format(pidfile=pidfile)}), Hold())
        events, result, alive = await _run(_config(home, deadline_seconds=5.0), home.workspace)
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format("deadline-exceeded")
    assert alive == []
    assert pidfile.exists(), "the deadline fired before the tool ran"
    _assert_gone(pidfile)
    assert ToolStarted(tool_kind="command", name="Bash", call_id="toolu_dsh_fixture") in events
    assert not any(isinstance(event, ToolFinished) for event in events)  # cut off mid-tool


async def test_a_silent_model_stream_trips_the_request_idle_timeout(tmp_path: Path) -> None:
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        fixture.enqueue(
            ToolUse("Bash", {"command": "echo before-the-silence"}, "toolu_echo"),
            StallMidStream("half an answ"),
        )
        config = _config(home, idle_timeout_seconds=600.0)  # the request tightens it
        events, result, alive = await _run(
            config, home.workspace, budget=Budget(idle_timeout_seconds=3.0)
        )
        stalled = fixture.holding
        requests = fixture.message_requests()
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format("idle-timeout")
    assert alive == []
    assert (stalled, len(requests)) == (1, 2)  # it fired while the second answer was silent
    assert ToolFinished(tool_kind="command", name="Bash", call_id="toolu_echo", ok=True) in events
    assert not any(isinstance(event, UsageUpdated) for event in events)  # no result came


async def test_max_budget_usd_stops_the_real_cli_with_error_max_budget_usd(tmp_path: Path) -> None:
    expensive = TokenUsage(input_tokens=1_000_000, output_tokens=10)
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        fixture.enqueue(
            ToolUse("Bash", {"command": "echo over-budget"}, usage=expensive),
            TextAnswer("never reached"),
        )
        events, result, alive = await _run(_config(home, max_budget_usd=0.01), home.workspace)
        requests = fixture.message_requests()
    assert result.stop_reason == ERROR
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(LINE.format("error_max_budget_usd")[:-1])
    assert len(requests) == 1  # the CLI stopped instead of asking for the next turn
    assert alive == []
    # This error result's own `usage` is all zeros; the per-model totals are the truth.
    usage = Usage(
        input_tokens=1_000_000,
        cached_input_tokens=0,
        output_tokens=10,
        reasoning_tokens=0,
        cost_usd=0,
    )
    assert result.usage is not None
    assert result.usage.model_copy(update={"cost_usd": 0}) == usage
    assert result.usage.cost_usd == pytest.approx(_cost(expensive), rel=1e-9)
    assert events[-1] == UsageUpdated(usage=result.usage)
