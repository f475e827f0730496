"""The function tools with the SDK's ScriptedModel driving a scripted provider (no process)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio
import pytest
from agents import Agent, FunctionTool, Runner, TracingProcessor, add_trace_processor
from agents.exceptions import UserError
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import Span, Trace
from dsh_openai_agents import ParentSource, SubagentFunctionTools
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
from oai_model import NO_TRACING, lead_model, tool_outputs
from pydantic import JsonValue

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="session-1", cwd="/work")
ARGS: dict[str, object] = {"description": "Answer", "prompt": "What is 6*7?"}


@dataclass
class AppContext:
    """A host application's run context: its own state plus the calling agent."""

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


def agent(tools: SubagentFunctionTools, *steps: Sequence[tuple[str, dict[str, object]]]) -> Agent:
    return Agent(name="lead", model=lead_model(*steps), tools=list(tools.function_tools))


async def python_tool_text(script: Script) -> str:
    """What the plain Python tool returns for the same run."""
    async with SubagentService() as service:
        tool = subagent(service, ScriptedProvider("p", [script]))
        context = ToolCallContext(parent=PARENT, cancel=CancelController().signal)
        return (await run_tool_call(tool, ARGS, context)).text


async def test_the_model_gets_each_dsh_tool_unchanged(service: SubagentService) -> None:
    async with JobRegistry() as jobs:
        service.register_provider(ScriptedProvider("p"))
        tool = SubagentTool(
            service,
            SubagentToolConfig(provider="p", max_depth="provider-managed"),
            BackgroundSubagentLauncher(jobs, service),
        )
        dsh_tools = [tool, *job_tools(jobs)]
        model = lead_model()
        functions = SubagentFunctionTools(dsh_tools).function_tools
        lead = Agent(name="lead", model=model, tools=list(functions))
        await Runner.run(lead, "hello", context=PARENT, run_config=NO_TRACING)
    (model_call,) = model.calls
    offered = [t for t in model_call.tools if isinstance(t, FunctionTool)]
    seen = [(t.name, t.description, t.params_json_schema) for t in offered]
    assert seen == [(t.name, t.description, t.parameters) for t in dsh_tools]
    # Strict mode is off: it would make the optional run_in_background required.
    assert {t.strict_json_schema for t in offered} == {False}


async def test_a_foreground_answer_is_the_python_tools_text(service: SubagentService) -> None:
    script = Script(output=(TextBlock(text="forty"), TextBlock(text="-two")))
    tools = SubagentFunctionTools([subagent(service, ScriptedProvider("p", [script]))])
    result = await Runner.run(
        agent(tools, [("subagent", ARGS)]), "go", context=PARENT, run_config=NO_TRACING
    )
    assert result.final_output == await python_tool_text(script) == "forty-two"


async def test_a_failed_run_is_the_python_tools_error_text(service: SubagentService) -> None:
    script = Script(
        stop_reason=ERROR,
        diagnostic="Product subagent failure (product: Scripted; stage: turn)",
        partial=(TextBlock(text="half an answer"),),
    )
    tools = SubagentFunctionTools([subagent(service, ScriptedProvider("p", [script]))])
    result = await Runner.run(
        agent(tools, [("subagent", ARGS)]), "go", context=PARENT, run_config=NO_TRACING
    )
    expected = await python_tool_text(script)
    assert expected.startswith("Error: subagent run failed\nDiagnostic: Product subagent failure")
    assert result.final_output == expected


async def test_the_parent_comes_from_the_run_context(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    tools = SubagentFunctionTools([subagent(service, provider)])
    context = AppContext(subagent_parent=ParentContext(session_id="chat-7", cwd="/srv/chat-7"))
    assert isinstance(context, ParentSource)
    await Runner.run(
        agent(tools, [("subagent", ARGS)]), "go", context=context, run_config=NO_TRACING
    )
    (record,) = provider.records
    assert record.request.parent == context.subagent_parent


async def test_no_context_gets_the_tools_own_error(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    tools = SubagentFunctionTools([subagent(service, provider)])
    result = await Runner.run(agent(tools, [("subagent", ARGS)]), "go", run_config=NO_TRACING)
    assert result.final_output == (
        "Error: subagent tool requires a calling agent (no parent context)"
    )
    assert provider.records == []


async def test_a_parent_of_the_wrong_type_fails_the_run(service: SubagentService) -> None:
    @dataclass
    class Wrong:
        subagent_parent: str = "session-1"

    provider = ScriptedProvider("p")
    tools = SubagentFunctionTools([subagent(service, provider)])
    with pytest.raises(UserError, match=r"Wrong\.subagent_parent must be"):
        await Runner.run(
            agent(tools, [("subagent", ARGS)]), "go", context=Wrong(), run_config=NO_TRACING
        )
    assert provider.records == []


@pytest.mark.parametrize("raw", ["not json", "[1, 2]"])
async def test_arguments_that_are_not_a_json_object_are_an_error_result(
    service: SubagentService, raw: str
) -> None:
    provider = ScriptedProvider("p")
    tools = SubagentFunctionTools([subagent(service, provider)])
    lead = Agent(
        name="lead",
        model=ScriptedModel(
            [[function_call("subagent", raw, call_id="call-1")], [assistant_message("done")]]
        ),
        tools=list(tools.function_tools),
    )
    result = await Runner.run(lead, "go", context=PARENT, run_config=NO_TRACING)
    assert tool_outputs(result.to_input_list()) == [
        ("subagent", "Error: invalid tool arguments: expected a JSON object")
    ]
    assert provider.records == []


async def test_two_tools_with_one_name_are_refused(service: SubagentService) -> None:
    tool = subagent(service, ScriptedProvider("p"))
    with pytest.raises(ValueError, match="duplicate tool name 'subagent'"):
        SubagentFunctionTools([tool, tool])


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
        tools = SubagentFunctionTools([tool, *job_tools(jobs)])
        lead = agent(
            tools,
            [("subagent", {**ARGS, "run_in_background": True})],
            [("job_output", {"job_id": "subagent-1", "wait": True})],
        )
        result = await Runner.run(lead, "go", context=PARENT, run_config=NO_TRACING)
        await jobs.dispose_owner(PARENT)
    assert result.final_output == (
        "started background subagent job subagent-1\n42\n[status: completed]"
    )


async def test_cancelling_the_run_cancels_the_delegation_and_wait_idle_sees_its_disposal(
    service: SubagentService,
) -> None:
    held = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("late"), hold_result=held)])
    tools = SubagentFunctionTools([subagent(service, provider)])
    lead = agent(tools, [("subagent", ARGS)])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: Runner.run(lead, "go", context=PARENT, run_config=NO_TRACING))
            await provider.wait_attempts(1)
            assert tools.in_flight == 1
            scope.cancel()
    assert scope.cancelled_caught
    await tools.wait_idle()
    (record,) = provider.records
    assert record.cancel_reasons[0] == FRAMEWORK_CANCEL_REASON
    assert record.teardowns == 1
    assert tools.in_flight == 0


async def test_the_sdks_own_cancel_of_a_streamed_run_cancels_the_delegation(
    service: SubagentService,
) -> None:
    held = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("late"), hold_result=held)])
    tools = SubagentFunctionTools([subagent(service, provider)])
    streamed = Runner.run_streamed(
        agent(tools, [("subagent", ARGS)]), "go", context=PARENT, run_config=NO_TRACING
    )
    async with anyio.create_task_group() as group:

        async def cancel_when_the_run_is_in_its_attempt() -> None:
            await provider.wait_attempts(1)
            streamed.cancel()

        group.start_soon(cancel_when_the_run_is_in_its_attempt)
        async for _ in streamed.stream_events():
            pass
    await tools.wait_idle()
    (record,) = provider.records
    assert record.cancel_reasons[0] == FRAMEWORK_CANCEL_REASON
    assert record.teardowns == 1
    assert not held.is_set()


class Recording(TracingProcessor):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.events.append("trace")

    def on_trace_end(self, trace: Trace) -> None:
        self.events.append("trace-end")

    def on_span_start(self, span: Span[Any]) -> None:
        self.events.append("span")

    def on_span_end(self, span: Span[Any]) -> None:
        self.events.append("span-end")

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


async def test_tracing_is_off_so_nothing_is_exported(service: SubagentService) -> None:
    """The suite disables tracing globally (conftest); no processor sees a trace or span."""
    from agents import set_trace_processors

    recording = Recording()
    add_trace_processor(recording)
    try:
        tools = SubagentFunctionTools([subagent(service, ScriptedProvider("p"))])
        result = await Runner.run(agent(tools, [("subagent", ARGS)]), "go", context=PARENT)
    finally:
        set_trace_processors([])
    assert result.final_output == "done"
    assert recording.events == []


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


async def test_the_sdk_stops_waiting_for_a_cancelled_call_and_wait_idle_does_not() -> None:
    """Why wait_idle exists: a cancelled Runner.run returns while the tool still tears down."""
    slow = SlowTeardownTool()
    tools = SubagentFunctionTools([slow])
    lead = agent(tools, [("slow", {})])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: Runner.run(lead, "go", context=PARENT, run_config=NO_TRACING))
            await slow.entered.wait()
            scope.cancel()
    assert slow.reason == FRAMEWORK_CANCEL_REASON
    assert tools.in_flight == 1
    slow.release.set()
    await tools.wait_idle()
    assert tools.in_flight == 0
