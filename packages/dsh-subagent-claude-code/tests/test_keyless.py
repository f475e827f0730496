"""Keyless real-product tier: the bundled Claude Code CLI against the loopback Messages fixture.

Required evidence (seed 004): never skipped. A missing bundled CLI fails these tests.
Each test gets its own temporary HOME, CLAUDE_CONFIG_DIR, XDG dirs and TMPDIR; the
only network is the fixture on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from claude_harness import SeamProvider, make_request, started, wait_for
from dsh_contract_tests.fixtures.messages import (
    Hold,
    HttpError,
    KeylessClaudeHome,
    MessagesFixture,
    TextAnswer,
    ToolUse,
    keyless_claude_home,
    task_texts,
)
from dsh_subagent import ABORTED, COMPLETED, ERROR, CancelController, SubagentResult
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_claude_code.product import bundled_cli_path
from dsh_subprocess import ManagedProcess, SpawnSpec, spawn
from dsh_subprocess.testing import host_descendants

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

TASK = "Reply with the sentinel and nothing else."
SENTINEL = "REAL_CLAUDE_CODE_SENTINEL_2_1_332"
SETTINGS_MODEL = "dsh-settings-inheritance-marker"


@pytest.fixture
def anyio_backend() -> str:
    # The SDK runs on trio too (package tests use both backends); the real-product tier
    # runs once, on asyncio, to keep two shared cores free for the other engineers.
    return "asyncio"


class SpawnSpy:
    """Records every spec handed to dsh_subprocess and the managed process it returned."""

    def __init__(self) -> None:
        self.specs: list[SpawnSpec] = []
        self.processes: list[ManagedProcess] = []

    async def __call__(self, spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        self.specs.append(spec)
        process = await spawn(spec, **kwargs)
        self.processes.append(process)
        return process


def _provider(
    home: KeylessClaudeHome,
    spy: SpawnSpy | None = None,
    *,
    max_turns: int | None = None,
    **config: Any,
) -> ClaudeCodeProvider:
    def hook(options: ClaudeAgentOptions) -> ClaudeAgentOptions:
        return dataclasses.replace(options, max_turns=max_turns)

    env = dict(home.env)
    if config.get("permission_mode") == "bypassPermissions" and os.geteuid() == 0:
        # The CLI refuses the dangerous bypass as root unless told it runs in a sandbox;
        # CI containers run as root. A deployment makes this choice in its own env.
        env["IS_SANDBOX"] = "1"
    return SeamProvider(
        ClaudeCodeConfig(env=env, **config),
        spawner=spy,
        options_hook=hook if max_turns is not None else None,
    )


def _descendants() -> set[int]:
    # The guard server is the host's long-lived helper, not the run's (it may start here).
    return {proc.pid for proc in host_descendants()}


async def _run(provider: ClaudeCodeProvider, cwd: Path, task: str = TASK) -> SubagentResult:
    async with started(provider, cwd, (task,)) as run:
        with anyio.fail_after(60):
            return await run.result()


async def test_exact_answer_fake_key_original_task_and_inherited_settings_model(
    tmp_path: Path,
) -> None:
    spy = SpawnSpy()
    with MessagesFixture([TextAnswer(SENTINEL)]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url, settings_model=SETTINGS_MODEL)
        started_at = time.monotonic()
        result = await _run(_provider(home, spy), home.workspace)
        elapsed = time.monotonic() - started_at
        requests = fixture.message_requests()
    print(f"\nkeyless delegation wall time: {elapsed:.3f} s")
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert result.text == SENTINEL
    assert len(requests) == 1
    [request] = requests
    assert request.method == "POST"
    assert request.headers["x-api-key"] == home.api_key
    assert "authorization" not in request.headers
    assert task_texts(request, TASK) == [TASK]
    # Omitted model: the marker from CLAUDE_CONFIG_DIR/settings.json reached the API.
    assert request.body["model"] == SETTINGS_MODEL
    [spec] = spy.specs
    assert spec.argv[0] == bundled_cli_path()  # resolved, never looked up on PATH
    assert "--model" not in spec.argv
    assert spec.cwd == str(home.workspace)
    assert all(not process.tree_alive() for process in spy.processes)


async def test_planted_host_credentials_never_reach_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "host-planted-anthropic-key")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "host-planted-auth-token")
    with MessagesFixture([TextAnswer(SENTINEL)]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        env = {k: v for k, v in home.env.items() if k not in ("ANTHROPIC_AUTH_TOKEN",)}
        result = await _run(ClaudeCodeProvider(ClaudeCodeConfig(env=env)), home.workspace)
        [request] = fixture.message_requests()
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert request.headers["x-api-key"] == home.api_key
    assert "authorization" not in request.headers
    assert "host-planted" not in repr(request.headers)


async def test_two_named_instances_keep_their_own_models(tmp_path: Path) -> None:
    with MessagesFixture(default=TextAnswer(SENTINEL)) as fixture:
        home_a = keyless_claude_home(tmp_path / "a", fixture.base_url, settings_model="marker-a")
        home_b = keyless_claude_home(tmp_path / "b", fixture.base_url, settings_model="marker-b")
        first = _provider(home_a, provider_name="claude-first", model="explicit-model-a")
        second = _provider(home_b, provider_name="claude-second", model="explicit-model-b")
        results: dict[str, SubagentResult] = {}

        async def one(provider: ClaudeCodeProvider, cwd: Path) -> None:
            results[provider.name] = await _run(provider, cwd)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, first, home_a.workspace)
            tg.start_soon(one, second, home_b.workspace)
        models = sorted(request.body["model"] for request in fixture.message_requests())
    assert {name: r.stop_reason for name, r in results.items()} == {
        "claude-first": COMPLETED,
        "claude-second": COMPLETED,
    }
    assert models == ["explicit-model-a", "explicit-model-b"]


async def test_dont_ask_denies_a_write_while_read_only_work_proceeds(tmp_path: Path) -> None:
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        readable = home.workspace / "notes.txt"
        readable.write_text("READABLE-CONTENT-4711\n", encoding="utf-8")
        target = home.workspace / "denied.txt"
        fixture.enqueue(
            ToolUse("Write", {"file_path": str(target), "content": "should not exist"}, "toolu_w"),
            ToolUse("Read", {"file_path": str(readable)}, "toolu_r"),
            TextAnswer("read done"),
        )
        result = await _run(_provider(home), home.workspace)
        requests = fixture.message_requests()
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert result.text == "read done"
    assert not target.exists()
    assert len(requests) == 3
    assert "READABLE-CONTENT-4711" in repr(requests[2].body["messages"][-1])


async def test_real_error_max_turns(tmp_path: Path) -> None:
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        target = home.workspace / "written.txt"
        fixture.enqueue(
            ToolUse("Write", {"file_path": str(target), "content": "SECRET-CONTENT-9"}),
            TextAnswer("never reached"),
        )
        provider = _provider(home, permission_mode="bypassPermissions", max_turns=1)
        result = await _run(provider, home.workspace)
        requests = fixture.message_requests()
    assert result.stop_reason == ERROR
    assert result.diagnostic is not None
    # The line the peer pins: the CLI reported the failure, so its exit joins nothing.
    assert result.diagnostic == (
        "Product subagent failure (product: Claude Code; stage: query-run; "
        "category: error_max_turns)"
    )
    assert target.read_text(encoding="utf-8") == "SECRET-CONTENT-9"
    assert "SECRET-CONTENT" not in result.diagnostic
    assert str(target) not in result.diagnostic
    assert len(requests) == 1


async def test_real_http_500_is_invalid_success_with_http_status(tmp_path: Path) -> None:
    with MessagesFixture([HttpError(500, "api_error", "fixture says sk-ant-secret")]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        result = await _run(_provider(home), home.workspace)
        requests = fixture.message_requests()
    assert result.stop_reason == ERROR
    assert result.diagnostic is not None
    assert result.diagnostic == (
        "Product subagent failure (product: Claude Code; stage: query-run; "
        "category: invalid-success; HTTP status: 500)"
    )
    assert "sk-ant" not in result.diagnostic
    assert len(requests) == 1  # retries are 0


# The tool: records its pid, and on SIGTERM records that it was asked to stop, then exits.
_SLEEPER = """\
import os, signal, sys, time
pidfile, asked = sys.argv[1], sys.argv[2]
def stop(*_):
    open(asked, "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(pidfile + ".partial", "w") as out:
    out.write(str(os.getpid()))
os.rename(pidfile + ".partial", pidfile)
time.sleep(300)
"""


async def test_cancel_mid_tool_settles_at_once_then_sigterm_ends_the_whole_tree(
    tmp_path: Path,
) -> None:
    # Event-based (no wall-clock bound): the result does not wait for any teardown (the
    # tool still runs when it arrives), and disposal ends the CLI and its tool with
    # SIGTERM, never needing the SIGKILL that would follow the dispose grace.
    spy = SpawnSpy()
    before = _descendants()
    with MessagesFixture() as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        # In the cwd: under confinement (on by default) the tool reaches nothing else.
        sleeper = home.workspace / "sleeper.py"
        sleeper.write_text(_SLEEPER, encoding="utf-8")
        pidfile, asked = home.workspace / "tool.pid", home.workspace / "tool-asked-to-stop"
        # The system Python: the test's own interpreter lives under the home here, which
        # confinement keeps unreadable (docs/troubleshooting.md).
        command = f"/usr/bin/python3 {sleeper} {pidfile} {asked}"
        fixture.enqueue(ToolUse("Bash", {"command": command}), Hold())
        provider = _provider(home, spy, permission_mode="bypassPermissions")
        cancel = CancelController()
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, home.workspace, (TASK,), cancel))
            await wait_for(pidfile.exists, within=60)
            tool = psutil.Process(int(pidfile.read_text()))
            [process] = spy.processes
            tool_pids = process.tree_pids()
            extra = _descendants() - before
            cancel.cancel()
            with anyio.fail_after(60):
                result = await run.result()
                tool_ran_at_result = tool.is_running() and tool.status() != psutil.STATUS_ZOMBIE
                await run.dispose()
    assert result.stop_reason == ABORTED
    assert result.diagnostic is None
    assert tool_ran_at_result, "the result waited for the teardown"
    assert len(tool_pids | extra) >= 3  # CLI, its shell and the python sleeper at least
    assert not process.tree_alive()
    assert _descendants() - before == set()
    assert asked.exists(), "the tool was killed without being asked to stop"
    assert process.exit_facts is not None
    assert process.exit_facts.signal != "SIGKILL", process.exit_facts


async def test_peak_rss_of_one_delegation(tmp_path: Path) -> None:
    with MessagesFixture([TextAnswer(SENTINEL)]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        result = await _run(_provider(home), home.workspace)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"\npeak RSS of the largest reaped child so far: {peak_kib / 1024:.1f} MiB")
    assert result.stop_reason == COMPLETED
    assert peak_kib > 0
