"""Tool calls hosted by an agent framework: the parent lookup and the cancellation bridge."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

import anyio
import pytest
from dsh_subagent import (
    FRAMEWORK_CANCEL_REASON,
    ParentContext,
    ParentSource,
    SubagentService,
    ToolCallContext,
    ToolCallRunner,
    ToolResult,
    parent_of,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from pydantic import JsonValue

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="session-1", cwd="/work")
ARGS = {"description": "Do it", "prompt": "do the thing"}


@dataclass
class Deps:
    subagent_parent: ParentContext
    other: str = "app state"


@dataclass
class WrongDeps:
    subagent_parent: str


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as running:
        yield running


def subagent(service: SubagentService, provider: ScriptedProvider) -> SubagentTool:
    service.register_provider(provider)
    config = SubagentToolConfig(provider=provider.name, max_depth="provider-managed")
    return SubagentTool(service, config)


def test_parent_of_accepts_a_parent_or_a_parent_source() -> None:
    deps = Deps(PARENT)
    assert isinstance(deps, ParentSource)
    assert parent_of(deps) is PARENT
    assert parent_of(PARENT) is PARENT


@pytest.mark.parametrize("source", [None, "session-1", {"subagent_parent": PARENT}])
def test_parent_of_anything_else_is_no_parent(source: object) -> None:
    assert parent_of(source) is None


def test_parent_of_refuses_a_parent_that_is_not_a_parent_context() -> None:
    with pytest.raises(TypeError, match=r"WrongDeps\.subagent_parent must be a .*ParentContext"):
        parent_of(WrongDeps("session-1"))


async def test_a_call_returns_the_tool_text_and_counts_in_flight(service: SubagentService) -> None:
    tool = subagent(service, ScriptedProvider("p", [Script.answer("forty-two")]))
    runner = ToolCallRunner()
    assert runner.in_flight == 0
    result = await runner.call(tool, ARGS, PARENT)
    assert result == ToolResult("forty-two")
    assert runner.in_flight == 0


async def test_no_parent_is_the_tools_own_error(service: SubagentService) -> None:
    tool = subagent(service, ScriptedProvider("p"))
    result = await ToolCallRunner().call(tool, ARGS, None)
    assert result == ToolResult(
        "Error: subagent tool requires a calling agent (no parent context)", is_error=True
    )


async def test_cancelling_the_caller_aborts_the_run_and_waits_for_its_disposal(
    service: SubagentService,
) -> None:
    held = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("late"), hold_result=held)])
    tool = subagent(service, provider)
    runner = ToolCallRunner()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(runner.call, tool, ARGS, PARENT)
            await provider.wait_attempts(1)
            assert runner.in_flight == 1
            scope.cancel()
    # The cancelled call returned only after the run settled aborted and was disposed.
    (record,) = provider.records
    assert record.cancel_reasons[0] == FRAMEWORK_CANCEL_REASON
    assert record.teardowns == 1
    assert runner.in_flight == 0
    assert not held.is_set()


class SlowTeardownTool:
    """A tool whose reaction to its cancel signal takes until the test releases it."""

    name = "slow"
    description = "waits for cancellation, then for the release"
    parameters: dict[str, JsonValue] = {"type": "object"}  # noqa: RUF012

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.finished = False
        self.reason: str | None = None

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        self.entered.set()
        self.reason = await context.cancel.wait()
        await self.release.wait()
        self.finished = True
        return ToolResult("stopped")


async def test_a_cancelled_call_keeps_waiting_through_repeated_cancellation() -> None:
    tool = SlowTeardownTool()
    runner = ToolCallRunner()
    outer_done = anyio.Event()

    async def caller() -> None:
        try:
            await runner.call(tool, {}, PARENT)
        finally:
            outer_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(caller)
        await tool.entered.wait()
        group.cancel_scope.cancel()
        # The call is cancelled (twice over: its group and the test's) but has not
        # returned: the tool is still tearing down.
        with anyio.CancelScope(shield=True):
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            assert tool.reason == FRAMEWORK_CANCEL_REASON
            assert not outer_done.is_set()
            assert runner.in_flight == 1
            tool.release.set()
            await outer_done.wait()
    assert tool.finished
    assert runner.in_flight == 0


async def test_wait_idle_returns_when_a_call_the_caller_left_behind_has_finished() -> None:
    tool = SlowTeardownTool()
    runner = ToolCallRunner()
    await runner.wait_idle()  # nothing in flight: returns at once
    async with anyio.create_task_group() as group:
        group.start_soon(runner.call, tool, {}, PARENT)
        await tool.entered.wait()
        group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            idle = anyio.Event()

            async def wait_idle() -> None:
                await runner.wait_idle()
                idle.set()

            async with anyio.create_task_group() as waiters:
                waiters.start_soon(wait_idle)
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                assert not idle.is_set()
                tool.release.set()
    assert idle.is_set()
    assert tool.finished


async def test_a_call_cancelled_before_dispatch_never_enters_the_tool() -> None:
    tool = SlowTeardownTool()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ToolCallRunner().call(tool, {}, PARENT)
    assert not tool.entered.is_set()
