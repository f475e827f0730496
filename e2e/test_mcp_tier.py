"""MCP tier: ``dsh mcp`` serves the REAL Codex and Claude Code to real MCP clients.

The server is the real ``dsh`` console script; the clients are the official MCP Python
client over a real stdio pipe and, end to end, the REAL Codex app-server acting as an MCP
client (keyless, against the loopback Responses fixture scripted to call the MCP tool).
Both products answer through the loopback model fixtures, each in its own temporary HOME,
CODEX_HOME, CLAUDE_CONFIG_DIR and TMPDIR. The client configurations come from the
dsh-mcp README's snippets, so a snippet that stops working fails here.

Lifetime is measured as the server promises it (docs/mcp.md): after the client is
SIGKILLed, no process of the server's tree may be left 2 s later (a bounded wait, not a
performance figure).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import claude_agent_sdk
import mcp_types as types
import psutil
import pytest
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES, keyless_products
from dsh_subagent import ConfinementSetting, delegate
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import ProcessWatch, reap_adopted_zombies, wait_gone
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
README = Path(__file__).resolve().parents[1] / "packages" / "dsh-mcp" / "README.md"
CODEX_ANSWER = "MCP_CODEX_SENTINEL_0163"
CLAUDE_ANSWER = "MCP_CLAUDE_CODE_SENTINEL"
TASK = "Reply with the sentinel and nothing else; this is a keyless MCP check."
UNCONFINED = ConfinementSetting(mode="off")
LIFETIME_SECONDS = 2.0


def readme_block(language: str, index: int = 0) -> str:
    """The ``index``-th fenced block of ``language`` in the dsh-mcp README."""
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return str(blocks[index])


def _placeholders(text: str, profile: Path, workspace: Path) -> str:
    return text.replace("/path/to/profile.toml", str(profile)).replace(
        "/path/to/project", str(workspace)
    )


@dataclass
class Products:
    root: Path
    workspace: Path
    codex_model: responses.ResponsesFixture
    claude_model: messages.MessagesFixture
    profile: Path
    env: dict[str, str]
    """The environment a client gives the server (temporary homes, loopback only)."""


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Products]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    env: dict[str, str] = {}
    for name in ("HOME", "TMPDIR"):
        path = tmp_path / f"server-{name.lower()}"
        path.mkdir()
        env[name] = str(path)
    env.update(NO_PROXY="127.0.0.1,localhost", HTTP_PROXY="", HTTPS_PROXY="", ALL_PROXY="")
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER) as running:
        yield Products(
            tmp_path,
            running.workspace,
            running.codex_model,
            running.claude_model,
            running.profile,
            env,
        )


def _snippet_params(products: Products, *extra: str) -> StdioServerParameters:
    """The Claude Desktop snippet, as a client reads it (``dsh`` resolved to the venv's),
    with ``extra`` arguments appended."""
    config = json.loads(
        _placeholders(readme_block("json", 0), products.profile, products.workspace)
    )
    # Cursor's snippet is the same mcpServers entry, so this covers both.
    assert json.loads(readme_block("json", 1)) == json.loads(readme_block("json", 0))
    server = config["mcpServers"]["dsh"]
    assert server["command"] == "dsh"
    return StdioServerParameters(
        command=str(DSH),
        args=[*server["args"], *extra],
        env=products.env,
        cwd=str(products.root),
    )


def _text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


def _alive_except_guards(watch: ProcessWatch) -> list[tuple[str, ...]]:
    """Command lines of the live processes, less dsh-subprocess's guards (plumbing)."""
    return [p.argv for p in watch.alive() if not any(a.endswith("_guard.py") for a in p.argv)]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_readme_snippet_lists_the_tools_and_delegates_to_both_real_products(
    products: Products,
) -> None:
    products.codex_model.enqueue(
        responses.PlainAnswer(CODEX_ANSWER, "final_answer"),
        responses.PlainAnswer(CODEX_ANSWER, "final_answer"),
    )
    printed = await anyio.to_thread.run_sync(
        functools.partial(
            subprocess.run,
            [str(DSH), "tools", str(products.profile)],
            capture_output=True,
            text=True,
            check=True,
        )
    )
    logs: list[types.LoggingMessageNotificationParams] = []
    reported: list[tuple[float, str | None]] = []
    noticed = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)
        if params.logger == "dsh.jobs":
            noticed.set()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, message))

    with ProcessWatch() as watch:
        async with (
            stdio_client(_snippet_params(products)) as (read, write),
            ClientSession(read, write, logging_callback=on_log) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            claude = await session.call_tool(
                "subagent_claude_code",
                {"description": "Claude sentinel", "prompt": TASK},
                progress_callback=on_progress,
            )
            codex = await session.call_tool(
                "subagent_codex", {"description": "Codex sentinel", "prompt": TASK}
            )
            started = await session.call_tool(
                "subagent_codex",
                {"description": "Codex job", "prompt": TASK, "run_in_background": True},
            )
            with anyio.fail_after(120):
                await noticed.wait()
            collected = await session.call_tool("job_output", {"job_id": "subagent-1"})
            after_calls = _alive_except_guards(watch)
    served = [
        {"name": t.name, "description": t.description, "parameters": t.input_schema}
        for t in listed.tools
    ]
    assert served == json.loads(printed.stdout)
    assert (_text(claude), claude.is_error) == (CLAUDE_ANSWER, False)
    assert claude.structured_content is not None
    assert claude.structured_content["stop_reason"] == "completed"
    usage = claude.structured_content["usage"]
    assert isinstance(usage, dict)
    assert (usage["input_tokens"], usage["output_tokens"]) == (7, 1)  # the fixture's numbers
    assert isinstance(usage["cost_usd"], float)  # as the Claude Code CLI computed it
    messages_seen = [message for _, message in reported]
    assert messages_seen[0] == "started working"
    assert f"assistant: {CLAUDE_ANSWER}" in messages_seen
    assert [value for value, _ in reported] == list(range(1, len(reported) + 1))
    assert (_text(codex), codex.is_error) == (CODEX_ANSWER, False)
    assert _text(started) == "started background subagent job subagent-1"
    notice = next(entry for entry in logs if entry.logger == "dsh.jobs")
    assert notice.data == (
        "background job subagent-1 (subagent: Codex job) finished [status: completed]. "
        "Read its output with job_output."
    )
    assert _text(collected) == f"{CODEX_ANSWER}\n[status: completed]"
    # Between calls only the server ran, and the one product per instance it keeps ready
    # (docs/harness.md, "Ready products"): every call's tree was gone when it returned.
    assert [argv[1:3] for argv in after_calls].count((str(DSH), "mcp")) == 1
    assert len(after_calls) <= 1 + 2, after_calls
    assert {"codex", "claude"} <= {p.name for p in watch.seen}
    assert watch.alive() == []
    (claude_request,) = products.claude_model.message_requests()
    assert messages.task_texts(claude_request, TASK) == [TASK]
    assert len(products.codex_model.requests) == 2


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_cancelling_a_real_codex_call_aborts_it_and_its_tree_is_gone(
    products: Products,
) -> None:
    products.codex_model.enqueue(responses.Hold())
    cancelled = anyio.Event()
    entries: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        entries.append(params)
        cancelled.set()

    with ProcessWatch() as watch:
        async with (
            # Cold: every Codex alive below is the call's (no product kept ready beside it).
            stdio_client(_snippet_params(products, "--warm", "0")) as (read, write),
            ClientSession(read, write, logging_callback=on_log) as session,
        ):
            await session.initialize()
            async with anyio.create_task_group() as group:
                scope = anyio.CancelScope()

                async def call() -> None:
                    with scope:
                        await session.call_tool(
                            "subagent_codex", {"description": "held", "prompt": TASK}
                        )

                group.start_soon(call)
                await anyio.to_thread.run_sync(products.codex_model.wait_for_hold)
                codex = [p for p in watch.alive() if p.name == "codex"]
                assert codex, "the real Codex app-server should be running"
                scope.cancel()
            with anyio.fail_after(60):
                await cancelled.wait()
            # The entry is sent after the tree exited: nothing of Codex may be left.
            left = wait_gone([p.process for p in codex], 0)
    assert entries[0].logger == "dsh.calls"
    assert entries[0].data == (
        "subagent_codex: call cancelled (cancelled by the MCP client); the run ended aborted "
        "and its process tree has exited"
    )
    assert left == []
    assert watch.alive() == []


KILL_CLIENT = Path(__file__).resolve().parents[1] / "packages/dsh-mcp/tests/mcp_kill_client.py"


def test_a_sigkilled_client_leaves_no_process_of_a_real_claude_code_run(
    products: Products,
) -> None:
    """Process accounting: the tree is listed while Claude Code holds, then must be gone."""
    products.claude_model.enqueue(messages.Hold())
    params = _snippet_params(products)
    errlog = (products.root / "client-stderr.txt").open("wb")
    client = subprocess.Popen(  # noqa: TID251 - the MCP client program, not a product
        [
            sys.executable,
            str(KILL_CLIENT),
            params.model_dump_json(),
            "subagent_claude_code",
            json.dumps({"description": "held", "prompt": TASK}),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=errlog,
    )
    try:
        products.claude_model.wait_for_holds(1, timeout=120)
        tree = psutil.Process(client.pid).children(recursive=True)
        accounting = ", ".join(f"{p.pid} {p.name()}" for p in tree)
        assert "claude" in {p.name() for p in tree}, accounting
        os.kill(client.pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        client.wait()
        errlog.close()
    left = wait_gone(tree, LIFETIME_SECONDS)
    took = time.monotonic() - killed_at
    reap_adopted_zombies()
    assert [p.pid for p in left] == [], (
        f"{took:.2f} s after SIGKILL of the client, still running: {left}; tree: {accounting}"
    )


def test_the_real_codex_app_server_delegates_to_claude_code_through_dsh_mcp(
    products: Products, tmp_path: Path
) -> None:
    """Codex is the MCP client: its model calls dsh's tool, Claude Code answers, Codex relays.

    The Codex configuration is the README's snippet, appended to the keyless config.toml.
    The Responses fixture plays Codex's model: its first answer is a function call to the
    ``subagent_claude_code`` tool of the ``mcp__dsh`` namespace; its second answer (to the
    request carrying the tool's output) relays that output, so the final answer proves
    the round trip.
    """
    claude_only = tmp_path / "claude-only.toml"
    text = products.profile.read_text(encoding="utf-8")
    claude_only.write_text(
        text.replace('[[tools]]\nname = "subagent_codex"\nprovider = "codex-keyless"', ""),
        encoding="utf-8",
    )
    delegated = {"description": "ask Claude Code", "prompt": TASK}

    def route(request: responses.RecordedRequest) -> responses.Behaviour:
        outputs = request.function_call_outputs()
        if outputs:
            return responses.PlainAnswer(f"Claude Code says: {outputs[-1]}", "final_answer")
        return responses.FunctionCall((("subagent_claude_code", delegated),), namespace="mcp__dsh")

    with responses.ResponsesFixture(route=route) as codex_model:
        codex_env = responses.codex_keyless_env(tmp_path / "outer-codex")
        config = responses.write_codex_config(codex_env["CODEX_HOME"], codex_model.base_url)
        snippet = _placeholders(readme_block("toml", 0), claude_only, products.workspace)
        snippet = snippet.replace('command = "dsh"', f"command = {json.dumps(str(DSH))}")
        assert tomllib.loads(snippet)["mcp_servers"]["dsh"]["args"][0] == "mcp"
        config.write_text(config.read_text(encoding="utf-8") + "\n" + snippet, encoding="utf-8")
        # The outer Codex stands for the user's own Codex, which no dsh confines: it is
        # only run through dsh here to drive it. Confined, it could not start dsh and the
        # inner products, whose installations are not its own.
        outer = CodexProvider(
            CodexConfig(provider_name="outer-codex", env=codex_env, confinement=UNCONFINED)
        )
        with ProcessWatch() as watch:
            result = anyio.run(
                functools.partial(
                    delegate,
                    outer,
                    "Ask Claude Code for the sentinel.",
                    cwd=str(products.workspace),
                )
            )
            left = watch.alive()
        first, second = codex_model.requests
    assert result.stop_reason == "completed", result.diagnostic
    assert sorted(first.advertised_tools("mcp__dsh")) == [  # Codex lists them sorted
        "job_kill",
        "job_list",
        "job_output",
        "subagent_claude_code",
    ]
    (output,) = second.function_call_outputs()
    structured = json.loads(output.split("Output:\n", 1)[1])  # Codex shows structured content
    assert structured["text"] == CLAUDE_ANSWER
    assert structured["stop_reason"] == "completed"
    assert result.text == f"Claude Code says: {output}"
    (claude_request,) = products.claude_model.message_requests()
    assert messages.task_texts(claude_request, TASK) == [TASK]
    names = {p.name for p in watch.seen}
    assert {"codex", "claude", "dsh"} <= names, names
    assert left == []


CLAUDE_CLI = Path(claude_agent_sdk.__file__).resolve().parent / "_bundled" / "claude"


def _claude_tool_results(request: messages.RecordedRequest) -> list[str]:
    found = []
    body = request.body if isinstance(request.body, dict) else {}
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found.append(block["content"] if isinstance(block["content"], str) else "")
    return found


def test_the_real_claude_code_added_with_claude_mcp_add_delegates_to_codex(
    products: Products, tmp_path: Path
) -> None:
    """The README's ``claude mcp add`` line, run by the real CLI, makes Claude Code a client.

    Claude Code's model (the Messages fixture) calls ``mcp__dsh__subagent_codex``; dsh
    delegates to the real Codex; the fixture's second answer relays the tool result.
    """
    products.codex_model.enqueue(responses.PlainAnswer(CODEX_ANSWER, "final_answer"))
    codex_only = tmp_path / "codex-only.toml"
    codex_only.write_text(
        products.profile.read_text(encoding="utf-8").replace(
            '[[tools]]\nname = "subagent_claude_code"\nprovider = "claude-keyless"', ""
        ),
        encoding="utf-8",
    )
    delegated = {"description": "ask Codex", "prompt": TASK}

    def route(request: messages.RecordedRequest) -> messages.Behaviour:
        results = _claude_tool_results(request)
        if results:
            return messages.TextAnswer(f"Codex says: {results[-1]}")
        return messages.ToolUse("mcp__dsh__subagent_codex", delegated)

    with messages.MessagesFixture(route=route) as claude_model:
        # Claude Code asks before it calls an MCP tool; an unattended run allows dsh's.
        outer = messages.keyless_claude_home(
            tmp_path / "outer-claude",
            claude_model.base_url,
            settings={"permissions": {"allow": ["mcp__dsh"]}},
        )
        line = _placeholders(readme_block("bash", 1), codex_only, products.workspace).strip()
        argv = shlex.split(line)
        assert argv[:5] == ["claude", "mcp", "add", "dsh", "--"]
        argv[0], argv[5] = str(CLAUDE_CLI), str(DSH)
        env = {**os.environ, **{k: v for k, v in outer.env.items() if v is not None}}
        added = subprocess.run(
            argv, cwd=products.workspace, env=env, capture_output=True, text=True, timeout=120
        )
        assert added.returncode == 0, added.stderr
        # The user's own Claude Code, run through dsh only to drive it (see above).
        provider = ClaudeCodeProvider(ClaudeCodeConfig(env=dict(outer.env), confinement=UNCONFINED))
        with ProcessWatch() as watch:
            result = anyio.run(
                functools.partial(
                    delegate, provider, "Ask Codex for the sentinel.", cwd=str(products.workspace)
                )
            )
            left = watch.alive()
        first, second = claude_model.message_requests()
    assert result.stop_reason == "completed", result.diagnostic
    (output,) = _claude_tool_results(second)
    structured = json.loads(output)
    assert (structured["text"], structured["stop_reason"]) == (CODEX_ANSWER, "completed")
    # Codex's usage as the loopback model reported it (the fixture's default counts).
    usage = structured["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cost_usd"]) == (10, 1, None)
    assert result.text == f"Codex says: {output}"
    _assert_one_codex_request(products)
    assert {"claude", "dsh", "codex"} <= {p.name for p in watch.seen}
    assert left == []
    assert first.is_message


def _assert_one_codex_request(products: Products) -> None:
    (request,) = products.codex_model.requests
    assert TASK in request.input_texts()
