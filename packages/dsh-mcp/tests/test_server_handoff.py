"""A foreground delegation still running after ``[mcp] foreground_seconds`` becomes a Job.

The real ``dsh mcp`` under the official MCP client. The product is the example child
with ``dsh-example/wait-for <gate>``: it notes each start and answers only once the test
creates the gate file, so it cannot answer before the bound (here 1 s) however fast or
slow the machine is, and the test lets it answer only after the call has returned.
"""

from __future__ import annotations

import json
import uuid

import anyio
import mcp_types as types
import pytest
from dsh_mcp.handoff import handoff_text, job_outcome
from dsh_mcp.settings import DEFAULT_FOREGROUND_SECONDS
from dsh_subagent import SubagentResult, TextBlock
from dsh_subagent.tool import ToolResult
from dsh_tool_jobs.model import JobOutcome
from mcp_sandbox import Sandbox, serve

pytestmark = pytest.mark.anyio


def _text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


def _slow(gate: str, token: str) -> dict[str, object]:
    return {
        "description": "slow answer",
        "prompt": f"dsh-example/wait-for {gate}\ndsh-contract/1 complete {token}",
    }


async def test_a_call_past_the_bound_returns_a_job_and_the_same_run_answers_it(
    box: Sandbox,
) -> None:
    gate, token = "GO-" + uuid.uuid4().hex[:8], box.token()
    profile = box.profile(mcp='workspace = "workspace"\nforeground_seconds = 1')
    async with serve(box, profile) as client:
        result = await client.session.call_tool("subagent_example", _slow(gate, token))
        assert result.is_error is False
        assert result.structured_content is not None
        job_id = result.structured_content["job_id"]
        assert job_id == "subagent-1"
        text = handoff_text("subagent_example", 1, job_id)
        assert _text(result) == text
        assert result.structured_content == {"text": text, "job_id": job_id}
        listed = await client.session.call_tool("job_list", {})
        assert _text(listed).startswith("subagent-1 [subagent] running — slow answer")

        (box.ready / gate).touch()  # the product may answer now
        final = await client.session.call_tool("job_output", {"job_id": job_id, "wait": True})
        assert _text(final) == f"{token}\n[status: completed]"
    # Not restarted: the product started once, and that run's answer is the job's.
    assert (box.ready / f"{gate}.starts").read_text(encoding="utf-8") == "started\n"


async def test_killing_the_job_cancels_the_call_that_became_it(box: Sandbox) -> None:
    gate, token = "GO-" + uuid.uuid4().hex[:8], box.token()
    profile = box.profile(mcp='workspace = "workspace"\nforeground_seconds = 1')
    async with serve(box, profile) as client:
        result = await client.session.call_tool("subagent_example", _slow(gate, token))
        assert result.structured_content is not None
        job_id = result.structured_content["job_id"]
        await anyio.to_thread.run_sync(box.wait_ready, f"{gate}.starts")  # the product runs
        killed = await client.session.call_tool("job_kill", {"job_id": job_id})
        assert _text(killed) == f"requested cancellation of job {job_id}"
        final = await client.session.call_tool("job_output", {"job_id": job_id, "wait": True})
        assert _text(final) == "(no new output)\n[status: killed]"
    # Killed means settled, and a call settles only after its run's tree has exited.
    assert (box.ready / f"{gate}.starts").read_text(encoding="utf-8") == "started\n"


async def test_without_job_tools_a_long_call_stays_in_the_foreground(box: Sandbox) -> None:
    """Deliberate: without ``[jobs]`` there is no job_output to collect a Job with, so the
    call waits for its run however long it takes. The bound here (1 ms) has long run out
    when the gate opens, since the product has started by then."""
    gate, token = "GO-" + uuid.uuid4().hex[:8], box.token()
    profile = box.root / "no-jobs.toml"
    profile.write_text(
        '[[providers]]\ntype = "example"\npass_env = ["DSH_CONTRACT_READY_DIR"]\n'
        f"config = {{ confinement = {{ write = [{json.dumps(str(box.ready))}] }} }}\n\n"
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n\n'
        '[mcp]\nworkspace = "workspace"\nforeground_seconds = 0.001\n',
        encoding="utf-8",
    )
    results: list[types.CallToolResult] = []
    async with serve(box, profile) as client, anyio.create_task_group() as group:

        async def call() -> None:
            results.append(await client.session.call_tool("subagent_example", _slow(gate, token)))

        group.start_soon(call)
        await anyio.to_thread.run_sync(box.wait_ready, f"{gate}.starts")  # the product runs
        (box.ready / gate).touch()
    (result,) = results
    assert _text(result) == token  # the answer itself, not a job id
    assert result.structured_content == {
        "text": token,
        "stop_reason": "completed",
        "usage": None,
        "changes": None,
    }


def test_the_default_bound_is_below_what_clients_wait() -> None:
    """Claude Desktop, Claude Code and Cursor abandon a tool call after 60-120 s."""
    assert 0 < DEFAULT_FOREGROUND_SECONDS < 60


@pytest.mark.parametrize(
    ("stop_reason", "diagnostic", "expected"),
    [
        ("completed", None, JobOutcome(status="completed", output="the answer")),
        ("aborted", None, JobOutcome(status="killed")),
        ("error", "boom", JobOutcome(status="failed", detail="error; diagnostic: boom")),
        ("max-tokens", None, JobOutcome(status="failed", detail="max-tokens")),
    ],
)
def test_a_call_that_became_a_job_ends_as_a_background_run_would(
    stop_reason: str, diagnostic: str | None, expected: JobOutcome
) -> None:
    settled = SubagentResult(
        output=(TextBlock(text="the answer"),), stop_reason=stop_reason, diagnostic=diagnostic
    )
    result = ToolResult("the answer", is_error=stop_reason != "completed")
    assert job_outcome(result, settled, cancelled=False) == expected


def test_a_call_that_never_started_is_killed_when_cancelled_else_failed() -> None:
    refused = ToolResult("Error: could not start", is_error=True)
    assert job_outcome(refused, None, cancelled=True) == JobOutcome(status="killed")
    assert job_outcome(refused, None, cancelled=False) == JobOutcome(
        status="failed", detail="could not start"
    )
