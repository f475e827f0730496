"""P1: one keyless Codex delegation, ours against the official ``openai-codex`` SDK.

Both sides run the same pinned app-server binary (``openai-codex-cli-bin`` 0.163.0)
against the same loopback Responses fixture, each with its own temporary HOME,
CODEX_HOME, TMPDIR and XDG dir, and an ephemeral thread with approval policy ``never``.
Timed: from the first call until the answer is in hand and the app-server has exited.

The phase breakdown of our side comes from separate, probed runs: the probe wraps the
provider's ``spawn`` seam (``ProductProvider.spawn``) and ``JsonRpcLines``' request and
frame methods for the duration of those runs only (timestamps, nothing else). The
provider package itself is not modified.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    ParentContext,
    ProductProvider,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver

from bench.bench_common import (
    Comparison,
    Profile,
    ProgressTally,
    clock,
    collect_progress,
    instrumentation_comparison,
    interleave_many,
    progress_comparison,
    ratio_rows,
    temp_root,
)

__all__ = [
    "ANSWER",
    "TASK",
    "CodexHome",
    "codex_home",
    "run_p1",
    "start_request",
]

TASK = "Reply with the bench sentinel. BENCH-TASK-MARKER"
ANSWER = "BENCH-CODEX-ANSWER"
TARGET = 1.0


@dataclass(frozen=True)
class CodexHome:
    """One isolated keyless Codex installation pointed at a fixture."""

    env: dict[str, str]
    workspace: Path

    def provider(self, name: str = "codex", **config: Any) -> CodexProvider:
        return CodexProvider(CodexConfig(provider_name=name, env=dict(self.env), **config))


def codex_home(root: Path, base_url: str) -> CodexHome:
    """Create HOME, CODEX_HOME (with a keyless config.toml), TMPDIR and a workspace."""
    env = codex_keyless_env(root)
    write_codex_config(env["CODEX_HOME"], base_url)
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return CodexHome(env=env, workspace=workspace)


def start_request(workspace: Path, task: str = TASK, **fields: Any) -> SubagentStartRequest:
    """A one-text-block request from a parent session rooted in ``workspace``."""
    return SubagentStartRequest(
        prompt=(TextBlock(text=task),),
        parent=ParentContext(session_id="bench", cwd=str(workspace)),
        **fields,
    )


async def ours_once(
    service: SubagentService,
    name: str,
    home: CodexHome,
    fixture: ResponsesFixture,
    progress: ProgressTally | None = None,
) -> float:
    """One full delegation through our provider: start → result → dispose (tree exit).

    With ``progress`` a consumer reads the run's progress stream and a listener hears it
    while the run works ("progress on"); without, nobody does.
    """
    fixture.enqueue(PlainAnswer(ANSWER))
    started = clock()
    run = await service.start(name, start_request(home.workspace))
    try:
        if progress is None:
            result = await run.result()
        else:
            result = await collect_progress(run, progress)
    finally:
        await run.dispose()
    elapsed = clock() - started
    if result.stop_reason != "completed" or result.text != ANSWER:
        raise RuntimeError(f"our Codex run failed: {result.stop_reason} {result.diagnostic}")
    return elapsed


async def official_once(
    home: CodexHome, fixture: ResponsesFixture, phases: dict[str, float] | None = None
) -> float:
    """The same delegation through the official SDK (``AsyncCodex``, asyncio only)."""
    from openai_codex import ApprovalMode, AsyncCodex
    from openai_codex import CodexConfig as OfficialConfig

    fixture.enqueue(PlainAnswer(ANSWER))
    config = OfficialConfig(env=dict(home.env), cwd=str(home.workspace))
    started = clock()
    async with AsyncCodex(config=config) as codex:
        entered = clock()
        thread = await codex.thread_start(
            approval_mode=ApprovalMode.deny_all, cwd=str(home.workspace), ephemeral=True
        )
        threaded = clock()
        result = await thread.run(TASK)
        turned = clock()
    elapsed = clock() - started
    if result.final_response != ANSWER:
        raise RuntimeError("the official SDK run did not return the answer")
    if phases is not None:
        phases["spawn+initialize"] = entered - started
        phases["thread/start"] = threaded - entered
        phases["turn (to result)"] = turned - threaded
        phases["teardown (to process exit)"] = started + elapsed - turned
    return elapsed


@contextlib.contextmanager
def probe_codex_wire(marks: dict[str, float]) -> Iterator[None]:
    """Timestamp the provider's spawn, requests, responses and notifications."""
    from dsh_subagent_codex.jsonrpc import Frame, JsonRpcLines

    original_spawn = CodexProvider.spawn
    original_send = JsonRpcLines.send_request
    original_next = JsonRpcLines.next_frame
    pending: dict[str, str] = {}

    async def spawn(
        self: ProductProvider[CodexConfig], spec: SpawnSpec, stderr_observer: StderrObserver
    ) -> ManagedProcess:
        proc = await original_spawn(self, spec, stderr_observer)
        marks["spawned"] = clock()
        return proc

    async def send_request(self: JsonRpcLines, method: str, params: Any) -> str:
        request_id = await original_send(self, method, params)
        pending[request_id] = method
        return request_id

    async def next_frame(self: JsonRpcLines) -> Frame:
        frame = await original_next(self)
        now = clock()
        if frame.is_response and frame.id in pending:
            marks.setdefault(f"response {pending[frame.id]}", now)
        elif frame.is_notification and frame.method is not None:
            marks.setdefault(f"notification {frame.method}", now)
        return frame

    CodexProvider.spawn = spawn  # type: ignore[method-assign]
    JsonRpcLines.send_request = send_request  # type: ignore[method-assign]
    JsonRpcLines.next_frame = next_frame  # type: ignore[method-assign]
    try:
        yield
    finally:
        CodexProvider.spawn = original_spawn  # type: ignore[method-assign]
        JsonRpcLines.send_request = original_send  # type: ignore[method-assign]
        JsonRpcLines.next_frame = original_next  # type: ignore[method-assign]


@contextlib.contextmanager
def unguarded_codex_spawn() -> Iterator[None]:
    """Diagnostic only: the provider's spawns run with ``host_death_guard=False``."""
    original_spawn = CodexProvider.spawn

    async def spawn(
        self: ProductProvider[CodexConfig], spec: SpawnSpec, stderr_observer: StderrObserver
    ) -> ManagedProcess:
        unguarded = spec.model_copy(update={"host_death_guard": False})
        return await original_spawn(self, unguarded, stderr_observer)

    CodexProvider.spawn = spawn  # type: ignore[method-assign]
    try:
        yield
    finally:
        CodexProvider.spawn = original_spawn  # type: ignore[method-assign]


async def ours_phases(
    service: SubagentService, home: CodexHome, fixture: ResponsesFixture
) -> dict[str, float]:
    """One probed delegation; returns the duration of each phase."""
    marks: dict[str, float] = {}
    fixture.enqueue(PlainAnswer(ANSWER))
    with probe_codex_wire(marks):
        started = clock()
        run = await service.start("codex", start_request(home.workspace))
        try:
            result = await run.result()
            resulted = clock()
        finally:
            await run.dispose()
        disposed = clock()
    if result.text != ANSWER:
        raise RuntimeError("probed Codex run failed")
    init = marks["response initialize"]
    thread = marks["response thread/start"]
    completed = marks["notification turn/completed"]
    return {
        "spawn (incl. guard)": marks["spawned"] - started,
        "initialize": init - marks["spawned"],
        "spawn+initialize": init - started,
        "thread/start": thread - init,
        "turn (turn/start→turn/completed)": completed - thread,
        "result delivery (turn/completed→result())": resulted - completed,
        "turn (to result)": resulted - thread,
        "teardown (to process exit)": disposed - resulted,
    }


def _median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


async def run_p1(profile: Profile) -> tuple[list[Comparison], dict[str, Any]]:
    """Interleaved rounds (ours, official, ours without guard), then probed breakdown runs.

    The third side is a diagnostic: the same provider with its spawns patched to
    ``host_death_guard=False``, to put a number on the guard's share of the difference.
    """
    with temp_root("p1") as root, ResponsesFixture() as fixture:
        ours_home = codex_home(root / "ours", fixture.base_url)
        official_home = codex_home(root / "official", fixture.base_url)
        async with SubagentService() as service:
            service.register_provider(ours_home.provider())

            async def ours() -> float:
                return await ours_once(service, "codex", ours_home, fixture)

            async def official() -> float:
                return await official_once(official_home, fixture)

            async def ours_unguarded() -> float:
                with unguarded_codex_spawn():
                    return await ours_once(service, "codex", ours_home, fixture)

            async def ours_progress(tally: ProgressTally) -> float:
                return await ours_once(service, "codex", ours_home, fixture, tally)

            a, b, c = await interleave_many(
                profile.warmup, profile.p1_pairs, (ours, official, ours_unguarded)
            )
            progress_row = await progress_comparison(
                "P1 Codex",
                "SubagentService + CodexProvider",
                profile.warmup,
                profile.p1_progress_pairs,
                ours,
                ours_progress,
            )
            otel_row = await instrumentation_comparison(
                "P1 Codex",
                "SubagentService + CodexProvider",
                profile.warmup,
                profile.p1_progress_pairs,
                ours,
            )
            ours_runs: list[dict[str, float]] = []
            unguarded_runs: list[dict[str, float]] = []
            official_runs: list[dict[str, float]] = []
            for _ in range(profile.p1_breakdown):
                ours_runs.append(await ours_phases(service, ours_home, fixture))
                phases: dict[str, float] = {}
                await official_once(official_home, fixture, phases)
                official_runs.append(phases)
                with unguarded_codex_spawn():
                    unguarded_runs.append(await ours_phases(service, ours_home, fixture))
    comparisons = ratio_rows(
        "P1 Codex",
        "SubagentService + CodexProvider",
        "openai-codex 0.163.0 AsyncCodex",
        b,
        (
            ("start→result→app-server exit", a),
            ("same, host-death guard off (diagnostic patch)", c),
        ),
        TARGET,
    )
    comparisons.extend((progress_row, otel_row))
    breakdown = {
        "n": profile.p1_breakdown,
        "ours_median_s": _median_phases(ours_runs),
        "ours_guard_off_median_s": _median_phases(unguarded_runs),
        "official_median_s": _median_phases(official_runs),
    }
    return comparisons, breakdown
