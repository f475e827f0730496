"""A typed subagent tool (``output_schema``) gives the Agents SDK model the validated object."""

from __future__ import annotations

import json

import pytest
from agents import Agent, Runner
from dsh_openai_agents import SubagentFunctionTools
from dsh_subagent import ParentContext, SubagentCapabilities, SubagentService, TextBlock
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from oai_model import NO_TRACING, lead_model
from pydantic import JsonValue

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="session-1", cwd="/work")
ARGS: dict[str, object] = {"description": "Review", "prompt": "Review the change."}
SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"verdict": {"type": "string"}},
    "required": ["verdict"],
}


async def _output(answer: str) -> str:
    provider = ScriptedProvider(
        "p",
        [Script(output=(TextBlock(text=answer),))],
        capabilities=SubagentCapabilities(output_schema=True),
    )
    async with SubagentService() as service:
        service.register_provider(provider)
        config = SubagentToolConfig(
            tool_name="subagent",
            provider="p",
            max_depth="provider-managed",
            enable_run_in_background=False,
            output_schema=SCHEMA,
        )
        tools = SubagentFunctionTools([SubagentTool(service, config)])
        lead = Agent(
            name="lead", model=lead_model([("subagent", ARGS)]), tools=list(tools.function_tools)
        )
        result = await Runner.run(lead, "go", context=PARENT, run_config=NO_TRACING)
    assert provider.records[0].request.output_schema == SCHEMA
    return str(result.final_output)


async def test_a_completed_typed_call_returns_exactly_the_object(anyio_backend: str) -> None:
    # The product's text may carry more than the object (spacing, key order): the model
    # gets the validated object itself.
    output = await _output('{ "verdict" : "approve" }')
    assert output == '{"verdict": "approve"}'


async def test_a_nonconforming_answer_is_the_error_text(anyio_backend: str) -> None:
    output = await _output(json.dumps({"verdict": 7}))
    assert output.startswith("Error: subagent run failed\nDiagnostic: Structured output failure")
    assert "$.verdict: wrong type (expected string)" in output
