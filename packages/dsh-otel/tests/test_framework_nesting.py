"""A delegation's span nests where the calling framework is: under pydantic-ai's tool-call
span, and under the host's span around an OpenAI Agents SDK run.

Both frameworks play the calling agent with their own offline test model; the tools come
from a Loader profile and delegate to the REAL Codex and Claude Code (keyless).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent as AgentsAgent
from agents import RunConfig, Runner, set_trace_processors, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from dsh_contract_tests.fixtures import responses
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)
from dsh_openai_agents import SubagentFunctionTools
from dsh_profiles import load_profile, open_runtime
from dsh_pydantic_ai import SubagentToolset
from dsh_subagent import ParentContext
from dsh_subprocess.testing import ProcessWatch
from opentelemetry.sdk.trace import ReadableSpan
from otel_capture import Captured
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

CLAUDE_ANSWER = "NESTED-CLAUDE-SENTINEL"
CODEX_ANSWER = "NESTED-CODEX-SENTINEL"
TASK = "Reply with the sentinel."

# The Agents SDK's own tracing would try its hosted backend: off, loopback only.
set_trace_processors([])
set_tracing_disabled(True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # both frameworks run tool calls as asyncio tasks


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER) as running:
        yield running


def _parent_of(span: ReadableSpan, captured: Captured) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    (parent,) = [
        s
        for s in captured.finished()
        if s.context is not None and s.context.span_id == span.parent.span_id
    ]
    return parent


async def test_nested_under_the_pydantic_ai_tool_call_span(
    products: KeylessProducts, captured: Captured
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            call = {"description": "Claude sentinel", "prompt": TASK}
            return ModelResponse(parts=[ToolCallPart("subagent_claude_code", call)])
        return ModelResponse(parts=[TextPart("done")])

    instrumentation = InstrumentationSettings(tracer_provider=captured.tracer_provider)
    lead = ParentContext(session_id="pai-lead", cwd=str(products.workspace))
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            agent = Agent(
                FunctionModel(model),
                toolsets=[SubagentToolset(runtime.tools.values())],
                capabilities=[Instrumentation(settings=instrumentation)],
            )
            with anyio.fail_after(180):
                await agent.run("Delegate.", deps=lead)
        assert watch.alive() == []
    (span,) = captured.delegations()
    tool_span = _parent_of(span, captured)
    assert dict(tool_span.attributes or {}).get("gen_ai.tool.name") == "subagent_claude_code"
    assert dict(span.attributes or {})["dsh.provider"] == "claude-keyless"


async def test_nested_under_the_hosts_span_around_an_agents_sdk_run(
    products: KeylessProducts, captured: Captured
) -> None:
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    arguments: dict[str, Any] = {"description": "Codex sentinel", "prompt": TASK}
    model = ScriptedModel(
        [
            [function_call("subagent_codex", arguments, call_id="call-1")],
            ModelStep.respond(lambda _call: [assistant_message("done")]),
        ]
    )
    lead = ParentContext(session_id="agents-lead", cwd=str(products.workspace))
    tracer = captured.tracer_provider.get_tracer("host")
    with ProcessWatch() as watch:
        async with open_runtime(load_profile(products.profile)) as runtime:
            tools = SubagentFunctionTools(runtime.tools.values())
            agent = AgentsAgent(name="lead", model=model, tools=list(tools.function_tools))
            with tracer.start_as_current_span("agents run") as host:
                with anyio.fail_after(180):
                    await Runner.run(
                        agent,
                        "Delegate.",
                        context=lead,
                        run_config=RunConfig(tracing_disabled=True),
                    )
        assert watch.alive() == []
    (span,) = captured.delegations()
    assert span.parent is not None
    assert span.parent.span_id == host.get_span_context().span_id
    assert dict(span.attributes or {})["gen_ai.provider.name"] == "openai"
