"""P2 and the Claude Code part of P3: our provider against bare ``claude_agent_sdk.query()``.

Both sides run the SDK's bundled CLI with the same options (built by the provider's own
``build_sdk_options``: cwd, ``dontAsk``, the keyless env, a denying ``can_use_tool`` and a
declining elicitation hook) against the same loopback Messages fixture, each with its
own temporary HOME, CLAUDE_CONFIG_DIR, XDG dirs and TMPDIR.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookContext,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    ToolPermissionContext,
    query,
)
from claude_agent_sdk.types import HookInput, HookJSONOutput
from dsh_contract_tests.fixtures.messages import (
    Hold,
    KeylessClaudeHome,
    MessagesFixture,
    TextAnswer,
    keyless_claude_home,
)
from dsh_subagent import CancelController, SubagentService
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_claude_code.launch import build_sdk_options
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver, spawn
from dsh_subprocess.testing import ProcessWatch, alive

from bench.bench_codex import start_request
from bench.bench_common import (
    Comparison,
    Profile,
    ProgressTally,
    clock,
    collect_progress,
    interleave_many,
    progress_comparison,
    ratio_rows,
    temp_root,
)

__all__ = ["claude_cancel_ours", "claude_cancel_sdk", "run_p2"]

TASK = "Reply with the bench sentinel and nothing else."
ANSWER = "BENCH-CLAUDE-ANSWER"
TARGET = 1.0


async def _deny(
    tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
) -> PermissionResultAllow | PermissionResultDeny:
    return PermissionResultDeny(message="unattended benchmark")


async def _decline(
    hook_input: HookInput, tool_use_id: str | None, context: HookContext
) -> HookJSONOutput:
    return {}


def official_options(home: KeylessClaudeHome) -> ClaudeAgentOptions:
    """The options our provider hands the SDK for a ``dontAsk`` run in ``home``."""
    return build_sdk_options(
        cwd=str(home.workspace),
        permission_mode="dontAsk",
        model=None,
        env=home.env,
        can_use_tool=_deny,
        elicitation_hook=_decline,
    )


def _provider(
    home: KeylessClaudeHome, name: str = "claude-code", *, guard: bool = True
) -> ClaudeCodeProvider:
    config = ClaudeCodeConfig(provider_name=name, env=dict(home.env))
    if guard:
        return ClaudeCodeProvider(config)
    return _UnguardedClaudeCodeProvider(config)


class _UnguardedClaudeCodeProvider(ClaudeCodeProvider):
    """Diagnostic only, through the provider runtime's ``spawn`` seam."""

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        unguarded = spec.model_copy(update={"host_death_guard": False})
        return await spawn(unguarded, stderr_observer=stderr_observer)


async def _ours_once(
    service: SubagentService,
    name: str,
    home: KeylessClaudeHome,
    progress: ProgressTally | None = None,
) -> float:
    started = clock()
    run = await service.start(name, start_request(home.workspace, TASK))
    try:
        if progress is None:
            result = await run.result()
        else:
            result = await collect_progress(run, progress)
    finally:
        await run.dispose()
    elapsed = clock() - started
    if result.stop_reason != "completed" or result.text != ANSWER:
        raise RuntimeError(f"our Claude Code run failed: {result.diagnostic}")
    return elapsed


async def _official_once(home: KeylessClaudeHome) -> float:
    options = official_options(home)
    answer: str | None = None
    started = clock()
    async for message in query(prompt=TASK, options=options):
        if isinstance(message, ResultMessage):
            answer = message.result
    elapsed = clock() - started
    if answer != ANSWER:
        raise RuntimeError("the bare query() run did not return the answer")
    return elapsed


async def run_p2(profile: Profile) -> list[Comparison]:
    """Interleaved rounds: our provider, bare ``query()``, ours without the guard.

    The third side is a diagnostic (the provider runtime's ``spawn`` seam with
    ``host_death_guard=False``), to put a number on the guard's share.
    """
    with temp_root("p2") as root, MessagesFixture(default=TextAnswer(ANSWER)) as fixture:
        ours_home = keyless_claude_home(_mkdir(root / "ours"), fixture.base_url)
        sdk_home = keyless_claude_home(_mkdir(root / "sdk"), fixture.base_url)
        bare_home = keyless_claude_home(_mkdir(root / "unguarded"), fixture.base_url)
        async with SubagentService() as service:
            service.register_provider(_provider(ours_home))
            service.register_provider(_provider(bare_home, "claude-unguarded", guard=False))

            async def ours() -> float:
                return await _ours_once(service, "claude-code", ours_home)

            async def official() -> float:
                return await _official_once(sdk_home)

            async def unguarded() -> float:
                return await _ours_once(service, "claude-unguarded", bare_home)

            async def ours_progress(tally: ProgressTally) -> float:
                return await _ours_once(service, "claude-code", ours_home, tally)

            a, b, c = await interleave_many(
                profile.warmup, profile.p2_pairs, (ours, official, unguarded)
            )
            progress_row = await progress_comparison(
                "P2 Claude Code",
                "SubagentService + ClaudeCodeProvider",
                profile.warmup,
                profile.p2_progress_pairs,
                ours,
                ours_progress,
            )
    rows = ratio_rows(
        "P2 Claude Code",
        "SubagentService + ClaudeCodeProvider",
        "claude_agent_sdk.query() 0.2.189",
        b,
        (
            ("start→result→CLI exit", a),
            ("same, host-death guard off (diagnostic, spawn seam)", c),
        ),
        TARGET,
    )
    return [*rows, progress_row]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


async def claude_cancel_ours(root: Path) -> tuple[float, float]:
    """Cancel our run while the model request is held.

    Returns:
        (cancel → ``aborted`` result, cancel → disposed with the whole tree gone).
    """
    with MessagesFixture([Hold()]) as fixture:
        home = keyless_claude_home(_mkdir(root), fixture.base_url)
        controller = CancelController()
        async with SubagentService() as service:
            service.register_provider(_provider(home))
            run = await service.start(
                "claude-code", start_request(home.workspace, TASK, cancel=controller.signal)
            )
            await anyio.to_thread.run_sync(fixture.wait_for_holds, 1, 60.0)
            cancelled = clock()
            controller.cancel()
            result = await run.result()
            settled = clock()
            await run.dispose()
            gone = clock()
    if result.stop_reason != "aborted":
        raise RuntimeError(f"cancelled Claude Code run settled {result.stop_reason}")
    return settled - cancelled, gone - cancelled


async def claude_cancel_sdk(root: Path) -> tuple[float, float]:
    """Cancel the task iterating bare ``query()`` while the model request is held.

    Returns:
        (cancel → the cancelled task finished, cancel → the CLI process gone).
    """
    with MessagesFixture([Hold()]) as fixture:
        home = keyless_claude_home(_mkdir(root), fixture.base_url)
        options = official_options(home)
        watch = ProcessWatch()

        async def consume() -> None:
            async for _message in query(prompt=TASK, options=options):
                pass

        async with anyio.create_task_group() as group:
            group.start_soon(consume)
            await anyio.to_thread.run_sync(fixture.wait_for_holds, 1, 60.0)
            cli = [seen.process for seen in watch.alive()]
            cancelled = clock()
            group.cancel_scope.cancel()
        settled = clock()
        with anyio.fail_after(30):
            # No event exists for a foreign process's exit: poll with a deadline.
            while alive(cli):  # noqa: ASYNC110
                await anyio.sleep(0.005)
        gone = clock()
    return settled - cancelled, gone - cancelled
