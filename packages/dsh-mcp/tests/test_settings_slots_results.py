"""Pure pieces: the ``[mcp]`` table, the delegation slots and what results look like."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from dsh_mcp.results import (
    MAX_PROGRESS_MESSAGE_CHARS,
    delegation_result,
    describe_progress,
    usage_json,
)
from dsh_mcp.settings import McpSettings, resolve_settings
from dsh_mcp.slots import DelegationSlots, busy_message
from dsh_profiles.errors import ProfileError, UsageError
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    SubagentResult,
    TextBlock,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent.tool import ToolResult


def test_defaults_and_no_workspace() -> None:
    settings = resolve_settings(None, "/nowhere/profile.toml")
    assert (settings.workspace, settings.max_concurrent_delegations) == (None, 4)
    assert settings.slot_wait_seconds == 30.0
    assert settings.foreground_seconds == 45.0
    assert settings.session_idle_seconds == 1800.0  # the MCP SDK's own default


def test_a_relative_workspace_is_read_against_the_profile_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "project").mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "project").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)  # a cwd that has a "project" too: it must not win
    settings = resolve_settings({"workspace": "../project"}, tmp_path / "profiles" / "p.toml")
    assert settings.workspace == str(tmp_path / "project")


def test_flags_win_over_the_table(tmp_path: Path) -> None:
    table = {"workspace": "nope", "max_concurrent_delegations": 2, "slot_wait_seconds": 5}
    settings = resolve_settings(
        table,
        tmp_path / "p.toml",
        workspace=str(tmp_path),
        max_concurrent_delegations=7,
        slot_wait_seconds=0.5,
    )
    assert (settings.workspace, settings.max_concurrent_delegations) == (str(tmp_path), 7)
    assert settings.slot_wait_seconds == 0.5


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"max_concurrent_delegations": 0}, "[mcp] field 'max_concurrent_delegations'"),
        ({"max_concurrent_delegations": True}, "[mcp] field 'max_concurrent_delegations'"),
        ({"slot_wait_seconds": 0}, "[mcp] field 'slot_wait_seconds'"),
        ({"slot_wait_seconds": math.inf}, "[mcp] field 'slot_wait_seconds'"),
        ({"foreground_seconds": 0}, "[mcp] field 'foreground_seconds'"),
        ({"foreground_seconds": math.nan}, "[mcp] field 'foreground_seconds'"),
        ({"foreground_seconds": 86401}, "[mcp] field 'foreground_seconds'"),
        ({"session_idle_seconds": 0}, "[mcp] field 'session_idle_seconds'"),
        ({"session_idle_seconds": math.inf}, "[mcp] field 'session_idle_seconds'"),
        ({"session_idle_seconds": 86401}, "[mcp] field 'session_idle_seconds'"),
        ({"workspace": ""}, "[mcp] field 'workspace'"),
        ({"spare": 1}, "[mcp] field 'spare': unknown field"),
    ],
)
def test_a_bad_table_names_its_field(table: dict[str, object], problem: str) -> None:
    with pytest.raises(ProfileError) as caught:
        resolve_settings(table, "p.toml")
    assert problem in str(caught.value)
    assert str(caught.value).startswith("p.toml: ")


def test_a_bad_flag_is_a_usage_error_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--max-concurrent-delegations: "):
        resolve_settings(None, "p.toml", max_concurrent_delegations=0)
    with pytest.raises(UsageError, match=r"^--foreground-seconds: "):
        resolve_settings(None, "p.toml", foreground_seconds=-1)
    assert resolve_settings({"foreground_seconds": 5}, "p.toml").foreground_seconds == 5.0
    assert resolve_settings(None, "p.toml", foreground_seconds=2.5).foreground_seconds == 2.5
    with pytest.raises(UsageError, match=r"^--session-idle-seconds: "):
        resolve_settings(None, "p.toml", session_idle_seconds=0)
    table: dict[str, object] = {"session_idle_seconds": 60}
    assert resolve_settings(table, "p.toml").session_idle_seconds == 60.0
    idle = resolve_settings(table, "p.toml", session_idle_seconds=5).session_idle_seconds
    assert idle == 5.0
    with pytest.raises(UsageError, match=r"^--workspace '.*missing' is not an existing directory"):
        resolve_settings(None, "p.toml", workspace=str(tmp_path / "missing"))


def test_the_settings_model_is_the_documented_table() -> None:
    assert set(McpSettings.model_fields) == {
        "workspace",
        "max_concurrent_delegations",
        "slot_wait_seconds",
        "foreground_seconds",
        "session_idle_seconds",
    }


@pytest.mark.anyio
async def test_slots_bound_the_wait_and_free_from_any_task() -> None:
    slots = DelegationSlots(1, 0.05)
    assert await slots.acquire()
    assert slots.in_use == 1
    assert not await slots.acquire()  # nobody released: the wait ran out
    got: list[bool] = []
    async with anyio.create_task_group() as group:
        waiting = DelegationSlots(1, 600)
        assert await waiting.acquire()

        async def wait_for_one() -> None:
            got.append(await waiting.acquire())

        group.start_soon(wait_for_one)
        await anyio.wait_all_tasks_blocked()
        waiting.release()  # released by another task than the one that acquired
    assert got == [True]
    with pytest.raises(ValueError, match="limit"):
        DelegationSlots(0, 1)


def test_the_busy_message_says_what_to_change() -> None:
    text = busy_message(3, 12.5)
    assert "all 3 delegation slots" in text
    assert "waited 12.5 s" in text
    assert "max_concurrent_delegations" in text


def test_progress_lines_skip_deltas_and_stay_bounded() -> None:
    assert describe_progress(TurnStarted()) == "started working"
    assert describe_progress(AssistantText(text="partial", delta=True)) is None
    long = describe_progress(AssistantText(text="x" * 5000))
    assert long is not None
    assert len(long) == MAX_PROGRESS_MESSAGE_CHARS
    assert describe_progress(ToolStarted(tool_kind="command", name="Bash")) == (
        "tool started: Bash (command)"
    )
    finished = ToolFinished(tool_kind="command", name="Bash", ok=False)
    assert describe_progress(finished) == "tool failed: Bash"
    assert describe_progress(FileChanged(path="a.py")) == "file changed: a.py"
    plan = PlanUpdated(steps=(PlanStep(text="a", status="completed"), PlanStep(text="b")))
    assert describe_progress(plan) == "plan: 1/2 steps completed"
    usage = Usage(input_tokens=10, output_tokens=2, cost_usd=0.000048)
    assert describe_progress(UsageUpdated(usage=usage)) == (
        "usage: 10 input tokens, 2 output tokens, $0.000048"
    )


def test_a_delegation_result_keeps_the_text_and_adds_usage_apart_from_it() -> None:
    usage = Usage(input_tokens=7, output_tokens=1, cost_usd=0.5)
    settled = SubagentResult(
        output=(TextBlock(text="the answer"),), stop_reason="completed", usage=usage
    )
    result = delegation_result(ToolResult("the answer"), settled=settled)
    assert result.content == [types.TextContent(type="text", text="the answer")]
    assert result.is_error is False
    assert result.structured_content == {
        "text": "the answer",
        "stop_reason": "completed",
        "usage": {
            "input_tokens": 7,
            "cached_input_tokens": None,
            "output_tokens": 1,
            "reasoning_tokens": None,
            "cost_usd": 0.5,
            "total_tokens": 8,
        },
        "changes": None,
    }
    assert usage_json(None) is None
    failed = delegation_result(ToolResult("Error: subagent run failed", is_error=True))
    assert failed.is_error is True
    assert failed.structured_content == {"text": "Error: subagent run failed"}
