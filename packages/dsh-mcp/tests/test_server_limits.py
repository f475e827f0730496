"""The concurrency bound, background Jobs with notices, and where a delegation works.

Real ``dsh mcp`` processes driven by the official MCP client; the product is the example
provider's scripted child.
"""

from __future__ import annotations

import anyio
import mcp_types as types
import psutil
import pytest
from dsh_mcp.slots import busy_message
from mcp_sandbox import Client, Sandbox, complete, hold, is_guard, serve, server_process

pytestmark = pytest.mark.anyio


def _text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def _hold_in(client: Client, box: Sandbox, group: anyio.abc.TaskGroup) -> anyio.CancelScope:
    """Start a held delegation; return the scope that cancels it once it holds."""
    token = box.token()
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            await client.session.call_tool("subagent_example", hold(token))

    group.start_soon(call)
    await anyio.to_thread.run_sync(box.wait_ready, token)
    return scope


async def test_a_delegation_beyond_the_bound_waits_a_bounded_time_then_fails(box: Sandbox) -> None:
    profile = box.profile(
        mcp='workspace = "workspace"\nmax_concurrent_delegations = 1\nslot_wait_seconds = 0.2'
    )
    token = box.token()
    busy = "Error: " + busy_message(1, 0.2)
    async with serve(box, profile) as client:
        async with anyio.create_task_group() as group:
            held = await _hold_in(client, box, group)
            refused = await client.session.call_tool("subagent_example", complete(token))
            # Job controls are not delegations: they never wait for a slot.
            listed = await client.session.call_tool("job_list", {})
            held.cancel()
        assert refused.is_error is True
        assert _text(refused) == busy
        assert refused.structured_content == {"text": busy}
        assert listed.is_error is False
        answered = await client.session.call_tool("subagent_example", complete(token))
        assert _text(answered) == token  # the cancelled call gave its slot back

        # A background delegation keeps its slot until its Job settles.
        started = await client.session.call_tool(
            "subagent_example", {**hold(box.token()), "run_in_background": True}
        )
        assert _text(started) == "started background subagent job subagent-1"
        assert started.structured_content == {
            "text": "started background subagent job subagent-1",
            "job_id": "subagent-1",
        }
        refused = await client.session.call_tool("subagent_example", complete(token))
        assert _text(refused) == busy
        killed = await client.session.call_tool("job_kill", {"job_id": "subagent-1"})
        assert _text(killed) == "requested cancellation of job subagent-1"
        final = await client.session.call_tool("job_output", {"job_id": "subagent-1", "wait": True})
        assert _text(final) == "(no new output)\n[status: killed]"
        answered = await client.session.call_tool("subagent_example", complete(token))
        assert _text(answered) == token


async def test_a_background_job_reports_through_a_log_message_and_the_job_tools(
    box: Sandbox,
) -> None:
    token = box.token()
    async with serve(box, box.profile()) as client:
        started = await client.session.call_tool(
            "subagent_example", complete(token, run_in_background=True)
        )
        assert _text(started) == "started background subagent job subagent-1"
        notice = await client.wait_log(lambda entry: entry.logger == "dsh.jobs")
        assert notice.level == "notice"
        assert notice.data == (
            "background job subagent-1 (subagent: answer) finished [status: completed]. "
            "Read its output with job_output."
        )
        listed = await client.session.call_tool("job_list", {})
        assert _text(listed).startswith("subagent-1 [subagent] ")
        output = await client.session.call_tool("job_output", {"job_id": "subagent-1"})
        assert _text(output) == f"{token}\n[status: completed]"
        unknown = await client.session.call_tool("job_kill", {"job_id": "subagent-9"})
        assert unknown.is_error is True


async def test_without_a_configured_workspace_the_clients_first_root_is_used(
    box: Sandbox,
) -> None:
    rooted = box.root / "client-root"
    rooted.mkdir()
    profile = box.profile(mcp=None)
    async with serve(box, profile, roots=[box.root / "not-a-directory", rooted]) as client:
        server = server_process()
        async with anyio.create_task_group() as group:
            held = await _hold_in(client, box, group)
            cwds = set()
            for proc in server.children(recursive=True):
                try:
                    if not is_guard(proc.cmdline()):
                        cwds.add(proc.cwd())
                except psutil.Error:
                    continue
            held.cancel()
        assert client.roots_asked == 1
    # The product runs in the client's root, never in the server's cwd (box.root).
    assert cwds == {str(rooted)}


async def test_without_workspace_or_roots_a_delegation_fails_loudly(box: Sandbox) -> None:
    async with serve(box, box.profile(mcp=None)) as client:
        result = await client.session.call_tool("subagent_example", complete(box.token()))
    assert result.is_error is True
    assert _text(result) == (
        "Error: no workspace for this delegation: start dsh mcp with --workspace DIR, or set "
        "workspace in the profile's [mcp] table (this client declares no roots)"
    )
