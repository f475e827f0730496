"""Permission facts, the four stages, cancellation, isolation, environment and cleanup."""

from __future__ import annotations

import os
import sys
from typing import Any, cast

import anyio
import psutil
import pytest
from claude_harness import Standin, make_request, run_once, started, wait_for
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    CancelController,
    ProductStartError,
    ProductTeardownError,
    StartCancelledError,
    SubagentError,
    SubagentErrorCode,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_claude_code.product import BundledCliError
from dsh_subagent_claude_code.provider import APPROVAL_DENIED_MESSAGE
from dsh_subprocess import ManagedProcess, SpawnSpec, spawn

pytestmark = pytest.mark.anyio

START_LINE = (
    "subagent-claude-code: Product subagent failure (product: Claude Code; stage: {stage}; "
    "category: {category})"
)
DENIED_BY_PROVIDER = (
    "Claude Code unattended decision (mode: {mode}; request: tool permission; decision: denied): "
    "the provider does not request human approval"
)
DENIED_BY_PRODUCT = (
    "Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: "
    "denied): Claude Code denied the request before an interactive prompt"
)
DECLINED = (
    "Claude Code unattended decision (mode: dontAsk; request: MCP elicitation; decision: "
    "declined): the provider does not collect interactive MCP input"
)
FAIL = {"op": "result", "subtype": "error_during_execution", "is_error": True}
SECRET = "sk-ant-planted-9f8e7d"


class CountingProcess:
    """A ManagedProcess proxy counting terminate() calls, optionally failing after it."""

    def __init__(self, inner: ManagedProcess, fail_terminate: bool) -> None:
        self._inner = inner
        self._fail = fail_terminate
        self.terminations = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def terminate(self) -> Any:
        self.terminations += 1
        facts = await self._inner.terminate()
        if self._fail:
            raise OSError(f"cleanup failed {SECRET}")
        return facts


class Spawner:
    def __init__(self, fail_terminate: bool = False) -> None:
        self.fail_terminate = fail_terminate
        self.processes: list[CountingProcess] = []

    async def __call__(self, spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        process = CountingProcess(await spawn(spec, **kwargs), self.fail_terminate)
        self.processes.append(process)
        return cast(ManagedProcess, process)


# -- permission facts -----------------------------------------------------------------


async def test_permission_prompt_is_denied_and_the_fact_follows_a_failure(
    standin: Standin,
) -> None:
    provider = standin.provider(
        [{"op": "can_use_tool", "tool_name": "Bash", "input": {"command": SECRET}}, FAIL]
    )
    result = await run_once(provider, standin.workspace)
    answer = standin.recorded("response-1.json")
    assert answer["response"] == {"behavior": "deny", "message": APPROVAL_DENIED_MESSAGE}
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Claude Code; stage: query-run; "
        "category: error_during_execution)\n" + DENIED_BY_PROVIDER.format(mode="dontAsk")
    )
    assert SECRET not in result.diagnostic


async def test_mode_is_named_in_the_fact(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "can_use_tool", "tool_name": "Edit", "input": {}}, FAIL],
        permission_mode="acceptEdits",
    )
    result = await run_once(provider, standin.workspace)
    assert result.diagnostic is not None
    assert result.diagnostic.endswith(DENIED_BY_PROVIDER.format(mode="acceptEdits"))


async def test_mcp_elicitation_is_declined(standin: Standin) -> None:
    provider = standin.provider([{"op": "elicitation"}, FAIL])
    result = await run_once(provider, standin.workspace)
    answer = standin.recorded("response-1.json")
    assert answer["response"]["hookSpecificOutput"] == {
        "hookEventName": "Elicitation",
        "action": "decline",
    }
    assert result.diagnostic is not None
    assert result.diagnostic.endswith("\n" + DECLINED)


async def test_latest_permission_fact_wins(standin: Standin) -> None:
    provider = standin.provider(
        [
            {"op": "can_use_tool", "tool_name": "Bash", "input": {}},
            {"op": "permission_denied"},
            FAIL,
        ]
    )
    result = await run_once(provider, standin.workspace)
    assert result.diagnostic is not None
    assert result.diagnostic.split("\n") == [
        "Product subagent failure (product: Claude Code; stage: query-run; "
        "category: error_during_execution)",
        DENIED_BY_PRODUCT,
    ]


async def test_success_after_a_denial_has_no_diagnostic(standin: Standin) -> None:
    provider = standin.provider(
        [{"op": "permission_denied", "message": SECRET}, {"op": "result", "result": "done"}]
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == COMPLETED
    assert result.diagnostic is None


# -- environment and argv ----------------------------------------------------------------


async def test_planted_host_credentials_never_reach_the_cli(
    standin: Standin, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = {
        "ANTHROPIC_API_KEY": "host-anthropic",
        "GITHUB_TOKEN": "host-github",
        "AWS_SECRET_ACCESS_KEY": "host-aws",
        "DB_PASSWORD": "host-db",
        "DSH_INTERNAL": "host-dsh",
        "CLAUDECODE": "host-nested-marker",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    provider = standin.provider(
        [{"op": "result", "result": "ok"}],
        env={"ANTHROPIC_API_KEY": "explicit-fake", "DSH_EXPLICIT": "explicit"},
    )
    result = await run_once(provider, standin.workspace)
    assert result.stop_reason == COMPLETED
    env = standin.recorded("env.json")
    assert env["ANTHROPIC_API_KEY"] == "explicit-fake"
    assert env["DSH_EXPLICIT"] == "explicit"
    assert env["HARMLESS_SETTING"] == "kept"
    for name, value in planted.items():
        assert env.get(name) != value, name
    assert not any(value in env.values() for value in planted.values())
    assert env["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert env["PWD"] == str(standin.workspace)


async def test_the_cli_gets_the_sdk_argv_and_the_cwd(standin: Standin) -> None:
    provider = standin.provider([{"op": "result", "result": "ok"}], model="m-1")
    await run_once(provider, standin.workspace)
    argv = standin.recorded("argv.json")
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert argv[argv.index("--model") + 1] == "m-1"
    assert "--no-session-persistence" in argv
    assert standin.recorded("initialize.json")["hooks"]["Elicitation"]


async def test_configured_cwd_overrides_the_parent(standin: Standin) -> None:
    other = standin.path("other")
    other.mkdir()
    provider = standin.provider([{"op": "result", "result": "ok"}], cwd=str(other))
    await run_once(provider, standin.workspace)
    assert standin.recorded("env.json")["PWD"] == str(other)


# -- before publication: launch, spawn, query-start -------------------------------------


async def _start_error(provider: ClaudeCodeProvider, cwd: Any, **kw: Any) -> SubagentError:
    async with anyio.create_task_group() as tg:
        with pytest.raises(SubagentError) as caught:
            await provider.start(make_request(tg, cwd, **kw))
    return caught.value


def _chain(error: BaseException) -> list[BaseException]:
    found = []
    current: BaseException | None = error
    while current is not None:
        found.append(current)
        current = current.__cause__
    return found


async def test_missing_bundled_cli_is_a_safe_launch_failure(standin: Standin) -> None:
    def missing() -> list[str]:
        raise BundledCliError(f"the CLI at /secret/{SECRET} is missing")

    provider = ClaudeCodeProvider(ClaudeCodeConfig(), cli_prefix=missing)
    error = await _start_error(provider, standin.workspace)
    assert isinstance(error, ProductStartError)
    assert error.message == START_LINE.format(stage="launch", category="unknown")
    assert any(isinstance(e, BundledCliError) for e in _chain(error))


async def test_spawn_failure_is_a_safe_spawn_failure(standin: Standin) -> None:
    nowhere = str(standin.path("no-such-claude"))
    provider = ClaudeCodeProvider(ClaudeCodeConfig(), cli_prefix=lambda: (nowhere,))
    error = await _start_error(provider, standin.workspace)
    assert isinstance(error, ProductStartError)
    assert error.message == START_LINE.format(stage="spawn", category="spawn-failed")
    assert nowhere not in error.message


@pytest.mark.parametrize("cwd", ["relative/dir", "/definitely/missing/dir"])
async def test_unusable_parent_cwd_is_no_working_directory_without_the_path(
    standin: Standin, cwd: str
) -> None:
    spawner = Spawner()
    provider = standin.provider([], spawner=spawner)
    error = await _start_error(provider, cwd)
    assert error.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert cwd not in error.message
    assert spawner.processes == []


async def test_no_working_directory_at_all(standin: Standin) -> None:
    spawner = Spawner()
    error = await _start_error(standin.provider([], spawner=spawner), None)
    assert isinstance(error, SubagentError)
    assert error.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert spawner.processes == []


@pytest.mark.parametrize("prompt", [(), ("   ", "\n")])
async def test_empty_or_blank_task_is_rejected_before_spawn(
    standin: Standin, prompt: tuple[str, ...]
) -> None:
    spawner = Spawner()
    error = await _start_error(
        standin.provider([], spawner=spawner), standin.workspace, prompt=prompt
    )
    assert isinstance(error, SubagentError)
    assert error.code == SubagentErrorCode.INVALID_REQUEST
    assert spawner.processes == []


async def test_pre_aborted_request_spawns_nothing(standin: Standin) -> None:
    spawner = Spawner()
    cancel = CancelController()
    cancel.cancel()
    error = await _start_error(
        standin.provider([], spawner=spawner), standin.workspace, cancel=cancel
    )
    assert isinstance(error, StartCancelledError)
    assert error.code == SubagentErrorCode.START_CANCELLED
    assert spawner.processes == []


async def test_cli_exit_before_publication_reports_its_exit_code(standin: Standin) -> None:
    async def exits_first(spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        process = await spawn(spec.model_copy(update={"argv": (sys.executable, "-c", "exit(17)")}))
        await process.wait()
        return process

    error = await _start_error(standin.provider([], spawner=exits_first), standin.workspace)
    assert isinstance(error, ProductStartError)
    assert error.message == (
        START_LINE.format(stage="query-start", category="process-exit")[:-1] + "; exit code: 17)"
    )


async def test_cancel_during_startup_rolls_back_the_tree(standin: Standin) -> None:
    cancel = CancelController()
    spawner = Spawner()

    async def cancelling(spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        # Like the real spawn, return the live handle; the abort lands right after.
        process = await spawner(spec, **kwargs)
        cancel.cancel()
        return process

    error = await _start_error(
        standin.provider([], spawner=cancelling), standin.workspace, cancel=cancel
    )
    assert isinstance(error, StartCancelledError)
    [process] = spawner.processes
    assert process.terminations == 1
    assert not process.tree_alive()


async def test_caller_cancellation_during_startup_rolls_back_the_tree(standin: Standin) -> None:
    spawner = Spawner()
    scope = anyio.CancelScope()

    async def cancels_caller(spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        process = await spawner(spec, **kwargs)
        scope.cancel()  # the task awaiting start() is cancelled, not the request
        return process

    provider = standin.provider([], spawner=cancels_caller)
    async with anyio.create_task_group() as tg:
        with scope:
            await provider.start(make_request(tg, standin.workspace))
    assert scope.cancelled_caught
    [process] = spawner.processes
    assert process.terminations == 1
    assert not process.tree_alive()


# -- cancellation, teardown, isolation ------------------------------------------------------


async def test_cancel_mid_run_is_aborted_and_reaps_a_tool_in_its_own_session(
    standin: Standin,
) -> None:
    marker, pidfile = standin.path("hanging"), standin.path("tool.pid")
    spawner = Spawner()
    provider = standin.provider(
        [
            {"op": "init"},
            {"op": "spawn_session_child", "pidfile": str(pidfile)},
            {"op": "touch", "path": str(marker)},
            {"op": "hang"},
        ],
        spawner=spawner,
    )
    cancel = CancelController()
    async with started(provider, standin.workspace, cancel=cancel) as run:
        await wait_for(marker.exists)
        tool = psutil.Process(int(pidfile.read_text()))
        await wait_for(lambda: os.getsid(tool.pid) == tool.pid)  # escaped the CLI's session
        cancel.cancel()
        with anyio.fail_after(10):
            result = await run.result()
        assert result.stop_reason == ABORTED
        assert result.diagnostic is None
        assert result.output == ()
        with anyio.fail_after(10):
            await run.dispose()
        assert not tool.is_running() or tool.status() == psutil.STATUS_ZOMBIE
        assert not spawner.processes[0].tree_alive()


async def test_cancel_after_a_success_arrived_still_aborts(standin: Standin) -> None:
    marker = standin.path("after-result")
    provider = standin.provider(
        [{"op": "result", "result": "late"}, {"op": "touch", "path": str(marker)}, {"op": "hang"}]
    )
    cancel = CancelController()
    async with started(provider, standin.workspace, cancel=cancel) as run:
        await wait_for(marker.exists)
        cancel.cancel()
        with anyio.fail_after(10):
            result = await run.result()
    assert result.stop_reason == ABORTED
    assert result.output == ()


async def test_dispose_is_idempotent_and_terminates_once(standin: Standin) -> None:
    spawner = Spawner()
    provider = standin.provider([{"op": "init"}, {"op": "hang"}], spawner=spawner)
    async with anyio.create_task_group() as tg:
        run = await provider.start(make_request(tg, standin.workspace))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as disposers:
                disposers.start_soon(run.dispose)
                disposers.start_soon(run.dispose)
            await run.dispose()
            result = await run.result()
    assert result.stop_reason == ABORTED
    [process] = spawner.processes
    assert process.terminations == 1
    assert not process.tree_alive()


async def test_teardown_failure_is_a_safe_teardown_line_after_whole_tree_exit(
    standin: Standin,
) -> None:
    spawner = Spawner(fail_terminate=True)
    provider = standin.provider([{"op": "result", "result": "ok"}], spawner=spawner)
    async with anyio.create_task_group() as tg:
        run = await provider.start(make_request(tg, standin.workspace))
        with anyio.fail_after(10):
            result = await run.result()
            with pytest.raises(ProductTeardownError) as caught:
                await run.dispose()
            with pytest.raises(ProductTeardownError):
                await run.dispose()
    assert result.stop_reason == COMPLETED
    assert caught.value.message == (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: teardown; category: unknown; exit code: 0)"
    )
    assert SECRET in str(caught.value.__cause__)
    assert not spawner.processes[0].tree_alive()


async def test_concurrent_runs_keep_their_own_results_and_facts(standin: Standin) -> None:
    provider = standin.provider(
        {
            "fails": [{"op": "can_use_tool", "tool_name": "Bash", "input": {}}, FAIL],
            "works": [{"op": "result", "result": "fine"}],
        }
    )
    results: dict[str, Any] = {}

    async def one(task: str) -> None:
        results[task] = await run_once(provider, standin.workspace, (task,))

    async with anyio.create_task_group() as tg:
        for task in ("fails", "works", "works", "fails"):
            tg.start_soon(one, task)
    assert results["works"].stop_reason == COMPLETED
    assert results["works"].diagnostic is None
    assert results["fails"].stop_reason == ERROR
    assert results["fails"].diagnostic.endswith(DENIED_BY_PROVIDER.format(mode="dontAsk"))


async def test_run_ids_are_fresh(standin: Standin) -> None:
    provider = standin.provider([{"op": "result", "result": "ok"}])
    ids = []
    for _ in range(2):
        async with started(provider, standin.workspace) as run:
            ids.append(run.id)
            await run.result()
    assert ids[0] != ids[1]
    assert "standin-session" not in ids
