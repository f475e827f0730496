"""A typed subagent tool (``output_schema``) gives the pydantic-ai model the validated object."""

from __future__ import annotations

import json

import pytest
from dsh_pydantic_ai import SubagentToolset
from dsh_subagent import ParentContext, SubagentCapabilities, SubagentService, TextBlock
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from pai_model import Steps, call, tool_returns
from pydantic import JsonValue
from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models.function import FunctionModel

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="session-1", cwd="/work")
ARGS = {"description": "Review", "prompt": "Review the change."}
SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"verdict": {"type": "string"}},
    "required": ["verdict"],
}


async def _returned(answer: str) -> ToolReturnPart:
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
        tool = SubagentTool(service, config)
        agent = Agent(FunctionModel(Steps([call("subagent", **ARGS)])))
        result = await agent.run("go", deps=PARENT, toolsets=[SubagentToolset([tool])])
    (returned,) = tool_returns(result.all_messages())
    assert provider.records[0].request.output_schema == SCHEMA
    return returned


async def test_a_completed_typed_call_returns_the_object(anyio_backend: str) -> None:
    returned = await _returned(json.dumps({"verdict": "approve"}))
    assert returned.content == {"verdict": "approve"}
    assert returned.outcome == "success"


async def test_a_nonconforming_answer_is_a_failed_result(anyio_backend: str) -> None:
    returned = await _returned(json.dumps({"verdict": 7}))
    assert returned.outcome == "failed"
    content = str(returned.content)
    assert content.startswith("Error: subagent run failed\nDiagnostic: Structured output failure")
    assert "$.verdict: wrong type (expected string)" in content
