"""``dsh mcp`` serves exactly the profile's tools and answers with the Python tool's texts.

Each test drives the real server process over a real stdio pipe with the official MCP
client; the product is the example provider's scripted child.
"""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from dsh_profiles.loader import load_profile
from dsh_profiles.runtime import open_runtime
from dsh_subagent import CancelController, ParentContext
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_subprocess.testing import ProcessWatch
from mcp.shared.exceptions import MCPError
from mcp_sandbox import DSH, Sandbox, complete, hold, is_guard, serve
from mcp_types import INVALID_PARAMS

pytestmark = pytest.mark.anyio


def _dsh(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DSH), *argv], input="", capture_output=True, text=True, env=env, timeout=120
    )


async def test_tools_list_is_exactly_what_dsh_tools_prints(box: Sandbox) -> None:
    profile = box.profile()
    printed = await anyio.to_thread.run_sync(lambda: _dsh("tools", str(profile), env=box.env))
    expected = json.loads(printed.stdout)
    async with serve(box, profile) as client:
        listed = await client.session.list_tools()
    served = [
        {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
        for tool in listed.tools
    ]
    assert served == expected
    assert [tool["name"] for tool in served] == [
        "subagent_example",
        "job_output",
        "job_list",
        "job_kill",
    ]
    assert all(tool.output_schema is None for tool in listed.tools)


async def test_a_failed_run_is_an_error_result_with_the_python_tools_own_text(
    box: Sandbox,
) -> None:
    profile = box.profile()
    arguments = {"description": "fail", "prompt": f"dsh-contract/1 fail {box.token()}"}
    async with serve(box, profile) as client:
        result = await client.session.call_tool("subagent_example", arguments)
    # The same call through the Python tool, in this process.
    parent = ParentContext(session_id="python", cwd=str(box.workspace))
    async with open_runtime(load_profile(profile)) as runtime:
        python = await run_tool_call(
            runtime.tools["subagent_example"],
            arguments,
            ToolCallContext(parent=parent, cancel=CancelController().signal),
        )
    assert python.is_error
    assert python.text.startswith("Error: subagent run failed\nDiagnostic: ")
    assert result.is_error is True
    assert [block.text for block in result.content if block.type == "text"] == [python.text]
    assert result.structured_content is not None
    assert result.structured_content["text"] == python.text
    assert result.structured_content["stop_reason"] == "error"


async def test_bad_arguments_and_unknown_tools_are_refused_and_start_nothing(box: Sandbox) -> None:
    token = box.token()
    with ProcessWatch() as watch:
        async with serve(box, box.profile()) as client:
            # A hold task: had anything started, it would still be running below.
            blank = await client.session.call_tool(
                "subagent_example", {"prompt": f"dsh-contract/1 hold {token}"}
            )
            extra = await client.session.call_tool(
                "subagent_example", {**hold(token), "colour": "red"}
            )
            with pytest.raises(MCPError) as unknown:
                await client.session.call_tool("no_such_tool", {})
            running = watch.alive()
    assert blank.is_error is True
    assert blank.content[0].type == "text"
    assert blank.content[0].text == 'Error: argument "description" must be a string'
    # The schema says additionalProperties: false, and the tool holds to it like job tools.
    assert extra.is_error is True
    assert extra.content[0].type == "text"
    assert extra.content[0].text == "Error: unexpected argument colour"
    # An unknown tool is a protocol error (JSON-RPC invalid params), as MCP specifies.
    assert unknown.value.error.code == INVALID_PARAMS
    assert unknown.value.error.message.startswith("unknown tool 'no_such_tool' (tools: ")
    assert [p.argv[1:3] for p in running] == [(str(DSH), "mcp")]  # the server alone
    assert not (box.ready / token).exists()


def test_a_bad_profile_stops_the_server_at_start_with_one_line(box: Sandbox) -> None:
    profile = box.profile(mcp="max_concurrent_delegations = 0\nnope = 1")
    with ProcessWatch() as watch:
        done = _dsh("mcp", str(profile), env=box.env)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == f"dsh mcp: error: {profile}: 2 problems:"
    assert (
        "[mcp] field 'max_concurrent_delegations': Input should be greater than or equal to 1"
        in done.stderr
    )
    assert "[mcp] field 'nope': unknown field" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(watch.seen) == 1  # the server process, and nothing it could have started


def test_a_missing_workspace_directory_is_refused_at_start(box: Sandbox) -> None:
    profile = box.profile(mcp='workspace = "does-not-exist"')
    done = subprocess.run(
        [str(DSH.with_name("dsh-mcp")), str(profile)],
        input="",
        capture_output=True,
        text=True,
        env=box.env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"dsh-mcp: error: {profile}: [mcp] workspace "
        f"'{box.root / 'does-not-exist'}' is not an existing directory\n"
    )


async def test_an_answer_has_structured_text_stop_reason_and_usage_and_leaves_no_process(
    box: Sandbox,
) -> None:
    token = box.token()
    async with serve(box, box.profile()) as client:
        with ProcessWatch() as watch:
            result = await client.session.call_tool("subagent_example", complete(token))
            after = watch.alive()
    assert result.is_error is False
    assert [block.text for block in result.content if block.type == "text"] == [token]
    # The example product reports no usage: null, never an estimate.
    assert result.structured_content == {
        "text": token,
        "stop_reason": "completed",
        "usage": None,
        "changes": None,
    }
    assert watch.seen  # the product's tree ran (the server started before the watch) ...
    assert [str(p) for p in after if not is_guard(p.argv)] == []  # ... and is gone now
