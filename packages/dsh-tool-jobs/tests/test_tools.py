"""The job controls as dsh_subagent ModelTools: names, schemas, descriptions, errors."""

from __future__ import annotations

import pytest
from dsh_subagent import CancelController, ParentContext
from dsh_subagent.tool_protocol import ModelTool, ToolCallContext, ToolResult, run_tool_call
from dsh_tool_jobs import (
    JOB_OUTPUT_DESCRIPTION,
    JobOutcome,
    JobRegistry,
    JobStart,
    JobsToolsConfig,
    job_tools,
)
from dsh_tool_jobs.testing import ScriptedProducer

pytestmark = pytest.mark.anyio


def test_tools_names_descriptions_and_schemas() -> None:
    tools = job_tools(JobRegistry())
    assert all(isinstance(tool, ModelTool) for tool in tools)
    output, listing, kill = tools
    assert [t.name for t in tools] == ["job_output", "job_list", "job_kill"]
    assert output.description == JOB_OUTPUT_DESCRIPTION
    assert listing.description == (
        "List your background jobs (running and finished) with their ids, kinds, and statuses."
    )
    assert kill.description == (
        "Request cancellation of a running background job by job id. Returns immediately; "
        "the job settles as killed once its work actually stops."
    )
    output_properties = output.parameters["properties"]
    assert isinstance(output_properties, dict)
    assert set(output_properties) == {"job_id", "wait", "timeout_ms"}
    assert output.parameters["required"] == ["job_id"]
    assert listing.parameters["properties"] == {}
    kill_properties = kill.parameters["properties"]
    assert isinstance(kill_properties, dict)
    assert set(kill_properties) == {"job_id", "reason"}


async def test_tools_use_the_call_parent_and_render_errors() -> None:
    owner = ParentContext(session_id="s")
    producer = ScriptedProducer()
    async with JobRegistry() as registry:
        output, listing, kill = job_tools(registry, JobsToolsConfig(wait_timeout_ms=5_000))
        job = registry.start(JobStart("bash", "make", owner, producer.run))
        context = ToolCallContext(owner, CancelController().signal)
        stranger = ToolCallContext(ParentContext(session_id="x"), CancelController().signal)
        assert await run_tool_call(listing, {}, context) == ToolResult(
            f"{job} [bash] running — make"
        )
        assert await run_tool_call(output, {"job_id": job}, stranger) == ToolResult(
            f"Error: job {job} belongs to another session", is_error=True
        )
        assert await run_tool_call(output, {"job_id": ""}, context) == ToolResult(
            'Error: invalid job_id: expected a non-empty string, got ""', is_error=True
        )
        producer.finish(JobOutcome(status="completed", output="built"))
        assert await run_tool_call(output, {"job_id": job, "wait": True}, context) == ToolResult(
            "built\n[status: completed]"
        )
        assert await run_tool_call(kill, {"job_id": job}, context) == ToolResult(
            f"job {job} had already finished [status: completed]"
        )
