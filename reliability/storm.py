"""Cancellation storm: many delegations, each cancelled at a random point.

Cancel points: before start, during startup, mid-turn, after completion, and a
concurrent double dispose racing a cancel. Checks: every published run settles exactly
once with a stop reason its cancel point allows, start/end events pair up one to one,
no process survives, descriptors return to their count and memory stays bounded.
"""

from __future__ import annotations

import gc
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import psutil
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    ParentContext,
    StartCancelledError,
    SubagentError,
    SubagentEvent,
    SubagentProvider,
    SubagentRunEnded,
    SubagentRunStarted,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subprocess.testing import ProcessWatch

from reliability.cells import ANSWER
from reliability.fakes import FakeSetup
from reliability.planted import Planted, find_leaks
from reliability.probes import fd_count, wait_fds_back

__all__ = ["CANCEL_POINTS", "StormReport", "run_storm"]

CANCEL_POINTS: Final = (
    "before-start",
    "during-startup",
    "mid-turn",
    "after-completion",
    "double-dispose",
)

_MAX_RSS_GROWTH: Final = 150 * 1024 * 1024
"""Bound on the host's RSS growth over a whole storm (leaked runs would grow it)."""


@dataclass
class StormReport:
    """What a storm did.

    Attributes:
        runs: Delegations attempted.
        settled_correctly: Delegations whose settlement matched their cancel point.
        problems: One line per wrong settlement, unpaired event or leak.
        survivors: Processes alive after the storm.
        fd_leak: Descriptors open beyond the count before the storm.
        rss_growth: Host RSS growth in bytes.
        by_point: Delegations per cancel point.
        seed: The random seed (rerun with it to reproduce).
        seconds: Wall time.
    """

    runs: int = 0
    settled_correctly: int = 0
    problems: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    fd_leak: int = 0
    rss_growth: int = 0
    by_point: Counter[str] = field(default_factory=Counter)
    seed: int = 0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Every delegation settled correctly and nothing was left behind."""
        return (
            self.settled_correctly == self.runs
            and not self.problems
            and not self.survivors
            and self.fd_leak == 0
            and self.rss_growth <= _MAX_RSS_GROWTH
        )


def _codex_steps(setup: FakeSetup, hang_at: str | None) -> list[dict[str, Any]]:
    ready = {"op": "ready", "path": str(setup.ready_marker)}
    steps: list[dict[str, Any]] = [{"op": "expect", "method": "initialize"}]
    if hang_at == "initialize":
        return [*steps, ready, {"op": "hang"}]
    steps += [
        {"op": "reply", "result": {"userAgent": setup.planted.env}},
        {"op": "expect", "method": "initialized"},
        {"op": "expect", "method": "thread/start"},
        {"op": "reply", "result": {"thread": {"id": "t", "ephemeral": True}}},
        {"op": "expect", "method": "turn/start"},
        {"op": "reply", "result": {"turn": {"id": "u", "status": "inProgress", "items": []}}},
    ]
    if hang_at == "turn":
        return [*steps, ready, {"op": "hang"}]
    item = {"type": "agentMessage", "id": "m", "text": ANSWER, "phase": "final_answer"}
    return [
        *steps,
        {
            "op": "send",
            "frame": {
                "method": "item/completed",
                "params": {"threadId": "t", "turnId": "u", "item": item},
            },
        },
        {
            "op": "send",
            "frame": {
                "method": "turn/completed",
                "params": {
                    "threadId": "t",
                    "turn": {"id": "u", "status": "completed", "error": None, "items": []},
                },
            },
        },
    ]


def _claude_steps(setup: FakeSetup, hang_at: str | None) -> list[dict[str, Any]]:
    if hang_at == "turn":
        return [{"op": "init"}, {"op": "touch", "path": str(setup.ready_marker)}, {"op": "hang"}]
    return [{"op": "init"}, {"op": "assistant", "text": ANSWER}, {"op": "result", "result": ANSWER}]


def _provider(product: str, setup: FakeSetup, point: str) -> SubagentProvider:
    hang_at = {"during-startup": "initialize", "mid-turn": "turn"}.get(point)
    if product == "codex":
        return setup.codex(_codex_steps(setup, hang_at), provider_name=f"codex-{setup.root.name}")
    if hang_at == "initialize":
        setup.prelude = [{"do": "hang", "path": str(setup.ready_marker)}]
    return setup.claude(_claude_steps(setup, hang_at), provider_name=f"claude-{setup.root.name}")


async def _until_ready(setup: FakeSetup) -> None:
    while not setup.ready_marker.exists():  # noqa: ASYNC110 - written by another process
        await anyio.sleep(0.01)


async def _one(
    index: int,
    point: str,
    product: str,
    root: Path,
    service: SubagentService,
    report: StormReport,
) -> None:
    setup = FakeSetup(root=root / f"run-{index}", planted=Planted())
    setup.root.mkdir()
    provider = _provider(product, setup, point)
    remove = service.register_provider(provider)
    controller = CancelController()
    request = SubagentStartRequest(
        prompt=(TextBlock(text=setup.planted.prompt()),),
        parent=ParentContext(session_id=f"storm-{index}", cwd=str(setup.workspace)),
        cancel=controller.signal,
    )
    where = f"run {index} ({product}, {point})"
    try:
        if point == "before-start":
            controller.cancel()
        async with anyio.create_task_group() as tg:
            if point in ("during-startup", "mid-turn"):

                async def cancel_when_ready() -> None:
                    await _until_ready(setup)
                    controller.cancel()

                tg.start_soon(cancel_when_ready)
            try:
                run = await service.start(provider.name, request)
            except SubagentError as exc:
                tg.cancel_scope.cancel()
                allowed = point in ("before-start", "during-startup")
                leaks = find_leaks(setup.planted, {"start error": str(exc)})
                cancelled = isinstance(exc, StartCancelledError)
                if allowed and cancelled and not leaks:
                    report.settled_correctly += 1
                else:
                    report.problems.append(f"{where}: start raised {exc} {leaks}")
                return
            try:
                if point == "double-dispose":
                    async with anyio.create_task_group() as racers:
                        racers.start_soon(run.dispose)
                        racers.start_soon(run.dispose)
                        controller.cancel()
                result = await run.result()
                if point == "after-completion":
                    controller.cancel()
                    if await run.result() != result:
                        report.problems.append(f"{where}: result changed after cancel")
            finally:
                await run.dispose()
            tg.cancel_scope.cancel()
        allowed_reasons = {
            "during-startup": {ABORTED},
            "mid-turn": {ABORTED},
            "after-completion": {COMPLETED},
            "double-dispose": {ABORTED, COMPLETED},
        }[point]
        leaks = find_leaks(setup.planted, {"output": result.text, "diagnostic": result.diagnostic})
        if (
            result.stop_reason in allowed_reasons
            and not leaks
            and (result.stop_reason != COMPLETED or result.text == ANSWER)
        ):
            report.settled_correctly += 1
        else:
            report.problems.append(f"{where}: settled {result.stop_reason} {leaks}")
    finally:
        remove()


def _check_events(events: list[SubagentEvent], report: StormReport) -> None:
    starts = Counter(e.run_id for e in events if isinstance(e, SubagentRunStarted))
    ends = Counter(e.run_id for e in events if isinstance(e, SubagentRunEnded))
    if any(count != 1 for count in starts.values()) or starts != ends:
        report.problems.append(
            f"lifecycle events not paired: {sum(starts.values())} start, {sum(ends.values())} end"
        )


async def run_storm(
    root: Path,
    runs: int,
    concurrency: int,
    seed: int | None = None,
    points: tuple[str, ...] = CANCEL_POINTS,
) -> StormReport:
    """Run ``runs`` delegations, at most ``concurrency`` at once, in ``root``.

    Codex and Claude Code fakes alternate (the ACP matrix cells cover ACP; its agent is
    a full interpreter with the ``acp`` library, ten times slower to start).
    """
    report = StormReport(seed=seed if seed is not None else random.randrange(2**32))
    rng = random.Random(report.seed)
    events: list[SubagentEvent] = []
    watch = ProcessWatch()
    fds_before = fd_count()
    rss_before = psutil.Process().memory_info().rss
    started = time.monotonic()
    limiter = anyio.CapacityLimiter(concurrency)

    async def limited(index: int, point: str, product: str, service: SubagentService) -> None:
        async with limiter:
            try:
                with anyio.fail_after(60):
                    await _one(index, point, product, root, service, report)
            except Exception as exc:  # one broken delegation must not hide the others
                report.problems.append(f"run {index} ({product}, {point}): raised {exc!r}")

    async with SubagentService() as service:
        service.add_listener(events.append)
        async with anyio.create_task_group() as tg:
            for index in range(runs):
                point = rng.choice(points)
                product = "codex" if index % 2 == 0 else "claude-code"
                report.runs += 1
                report.by_point[point] += 1
                tg.start_soon(limited, index, point, product, service)
    report.seconds = time.monotonic() - started
    _check_events(events, report)
    report.survivors += watch.kill_leftovers()
    gc.collect()  # surface abandoned generators/resources inside this call
    report.fd_leak = await wait_fds_back(fds_before)
    report.rss_growth = psutil.Process().memory_info().rss - rss_before
    return report
