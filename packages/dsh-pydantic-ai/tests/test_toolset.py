"""The toolset with pydantic-ai's FunctionModel driving a scripted provider (no process)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace

import anyio
import anyio.lowlevel
import pytest
from dsh_pydantic_ai import ParentSource, SubagentToolset
from dsh_subagent import (
    ERROR,
    FRAMEWORK_CANCEL_REASON,
    CancelController,
    ParentContext,
    SubagentService,
    TextBlock,
    ToolCallContext,
    ToolResult,
    run_tool_call,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from dsh_tool_jobs import BackgroundSubagentLauncher, JobRegistry, job_tools
from pai_model import Steps, call, tool_returns
from pydantic import JsonValue
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.models.function import FunctionModel

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="session-1", cwd="/work")
ARGS = {"description": "Answer", "prompt": "What is 6*7?"}


@dataclass
class AppDeps:
    """A host application's deps: its own state plus the calling agent."""

    subagent_parent: ParentContext
    user: str = "ada"


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as running:
        yield running


def subagent(
    service: SubagentService, provider: ScriptedProvider, *, background: bool = False
) -> SubagentTool:
    service.register_provider(provider)
    config = SubagentToolConfig(
        tool_name="subagent",
        provider=provider.name,
        max_depth="provider-managed",
        enable_run_in_background=background,
    )
    return SubagentTool(service, config)


async def python_tool_text(script: Script) -> str:
    """What the plain Python tool returns for the same run."""
    async with SubagentService() as service:
        tool = subagent(service, ScriptedProvider("p", [script]))
        context = ToolCallContext(parent=PARENT, cancel=CancelController().signal)
        return (await run_tool_call(tool, ARGS, context)).text


async def test_the_model_gets_each_dsh_tool_unchanged(service: SubagentService) -> None:
    async with JobRegistry() as jobs:
        launcher = BackgroundSubagentLauncher(jobs, service)
        service.register_provider(ScriptedProvider("p"))
        tool = SubagentTool(
            service, SubagentToolConfig(provider="p", max_depth="provider-managed"), launcher
        )
        dsh_tools = [tool, *job_tools(jobs)]
        steps = Steps()
        agent = Agent(FunctionModel(steps), toolsets=[SubagentToolset(dsh_tools)])
        await agent.run("hello", deps=PARENT)
    (info,) = steps.infos
    seen = [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools]
    assert seen == [(t.name, t.description, t.parameters) for t in dsh_tools]
    assert [t.name for t in info.function_tools] == [
        "subagent",
        "job_output",
        "job_list",
        "job_kill",
    ]
    # Strict mode is off: it could rewrite the optional run_in_background parameter.
    assert {t.strict for t in info.function_tools} == {False}


async def test_a_foreground_answer_is_the_python_tools_text(service: SubagentService) -> None:
    script = Script(output=(TextBlock(text="forty"), TextBlock(text="-two")))
    tool = subagent(service, ScriptedProvider("p", [script]))
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
    result = await agent.run("go", deps=PARENT, toolsets=[SubagentToolset([tool])])
    (returned,) = tool_returns(result.all_messages())
    assert returned.content == await python_tool_text(script) == "forty-two"
    assert returned.outcome == "success"


async def test_a_failed_run_is_a_failed_result_with_the_python_tools_text(
    service: SubagentService,
) -> None:
    script = Script(
        stop_reason=ERROR,
        diagnostic="Product subagent failure (product: Scripted; stage: turn)",
        partial=(TextBlock(text="half an answer"),),
    )
    tool = subagent(service, ScriptedProvider("p", [script]))
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
    result = await agent.run("go", deps=PARENT, toolsets=[SubagentToolset([tool])])
    (returned,) = tool_returns(result.all_messages())
    expected = await python_tool_text(script)
    assert expected.startswith("Error: subagent run failed\nDiagnostic: Product subagent failure")
    assert returned.content == expected
    # A failed result, not a retry prompt: the model adapts instead of repeating the call.
    assert returned.outcome == "failed"


async def test_the_parent_comes_from_the_deps(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    tool = subagent(service, provider)
    deps = AppDeps(subagent_parent=ParentContext(session_id="chat-7", cwd="/srv/chat-7"))
    assert isinstance(deps, ParentSource)
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])), deps_type=AppDeps)
    await agent.run("go", deps=deps, toolsets=[SubagentToolset([tool])])
    (record,) = provider.records
    assert record.request.parent == deps.subagent_parent


async def test_deps_without_a_parent_get_the_tools_own_error(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    tool = subagent(service, provider)
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
    result = await agent.run("go", toolsets=[SubagentToolset([tool])])
    (returned,) = tool_returns(result.all_messages())
    assert returned.content == "Error: subagent tool requires a calling agent (no parent context)"
    assert provider.records == []


async def test_a_parent_of_the_wrong_type_fails_the_run(service: SubagentService) -> None:
    @dataclass
    class Wrong:
        subagent_parent: str = "session-1"

    provider = ScriptedProvider("p")
    tool = subagent(service, provider)
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])), deps_type=Wrong)
    with pytest.raises(TypeError, match=r"Wrong\.subagent_parent must be"):
        await agent.run("go", deps=Wrong(), toolsets=[SubagentToolset([tool])])
    assert provider.records == []


async def test_two_tools_with_one_name_are_refused(service: SubagentService) -> None:
    tool = subagent(service, ScriptedProvider("p"))
    with pytest.raises(ValueError, match="duplicate tool name 'subagent'"):
        SubagentToolset([tool, tool])


async def test_run_in_background_returns_the_job_id_and_job_output_collects(
    service: SubagentService,
) -> None:
    service.register_provider(ScriptedProvider("p", [Script.answer("42")]))
    async with JobRegistry() as jobs:
        tool = SubagentTool(
            service,
            SubagentToolConfig(provider="p", max_depth="provider-managed"),
            BackgroundSubagentLauncher(jobs, service),
        )
        toolset = SubagentToolset([tool, *job_tools(jobs)])
        steps = Steps(
            [call("subagent", **ARGS, run_in_background=True)],
            [call("job_output", job_id="subagent-1", wait=True)],
        )
        result = await Agent(FunctionModel(steps)).run("go", deps=PARENT, toolsets=[toolset])
        await jobs.dispose_owner(PARENT)
    started, collected = tool_returns(result.all_messages())
    assert started.content == "started background subagent job subagent-1"
    assert collected.content == "42\n[status: completed]"


async def test_cancelling_the_run_cancels_the_delegation_and_waits_for_its_disposal(
    service: SubagentService,
) -> None:
    held = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("late"), hold_result=held)])
    toolset = SubagentToolset([subagent(service, provider)])
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: agent.run("go", deps=PARENT, toolsets=[toolset]))
            await provider.wait_attempts(1)
            assert toolset.in_flight == 1
            scope.cancel()
    assert scope.cancelled_caught
    (record,) = provider.records
    assert record.cancel_reasons[0] == FRAMEWORK_CANCEL_REASON
    assert record.teardowns == 1
    assert toolset.in_flight == 0


async def test_pydantic_ais_own_cancel_cancels_the_delegation(service: SubagentService) -> None:
    held = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("late"), hold_result=held)])
    toolset = SubagentToolset([subagent(service, provider)])
    agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
    token = CancellationToken()
    outcome: list[BaseException] = []

    async def run() -> None:
        try:
            await agent.run("go", deps=PARENT, toolsets=[toolset], cancellation_token=token)
        except RunCancelled as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await provider.wait_attempts(1)
        token.cancel()
    assert len(outcome) == 1
    (record,) = provider.records
    assert record.cancel_reasons[0] == FRAMEWORK_CANCEL_REASON
    assert record.teardowns == 1
    assert toolset.in_flight == 0


class SlowTeardownTool:
    """A dsh tool whose reaction to its cancel signal lasts until the test releases it."""

    name = "slow"
    description = "waits for cancellation, then for the release"
    parameters: dict[str, JsonValue] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.reason: str | None = None

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        self.entered.set()
        self.reason = await context.cancel.wait()
        await self.release.wait()
        return ToolResult("stopped")


async def test_a_cancelled_run_returns_only_after_the_tool_call_finished() -> None:
    """pydantic-ai drains its cancelled tool tasks, so the run itself waits for the teardown."""
    slow = SlowTeardownTool()
    toolset = SubagentToolset([slow])
    agent = Agent(FunctionModel(Steps([call("slow")])))
    returned = anyio.Event()
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await agent.run("go", deps=PARENT, toolsets=[toolset])
        returned.set()

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await slow.entered.wait()
        scope.cancel()
        for _ in range(50):
            await anyio.lowlevel.checkpoint()
        assert slow.reason == FRAMEWORK_CANCEL_REASON
        assert not returned.is_set()
        assert toolset.in_flight == 1
        slow.release.set()
        await returned.wait()
    assert toolset.in_flight == 0
