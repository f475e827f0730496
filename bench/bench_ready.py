"""P10: a delegation on a ready product (``warm``) against a cold start and the official SDK.

``python -m bench.bench_ready [--rounds N] [--batch N] [--pairs N] [--products LIST]
[--json PATH]``. Same run, instant
model (the loopback fixtures answer at once), interleaved rounds, medians:

* per product, task submitted → result in hand: ours with a ready product (the pool is
  full when the task arrives: the steady state of a surface whose tasks come slower than
  a product starts), ours cold, and the official SDK's one-call path (Codex
  ``AsyncCodex`` thread start + run; Claude ``query()``); codex-acp has no official SDK,
  so only ready against cold. The target is ready ≤ 0.5 × the official SDK.
* ``dsh batch``-style throughput: N tasks at concurrency 4 through one service,
  ``warm = 4`` against ``warm = 0``, Codex and Claude Code, cold and ready batches
  interleaved in pairs (the order alternating) and reported as per-pair ratios.
* idle memory: the summed RSS of one ready product's process tree (guard included).

The load average is printed with the figures: on a shared machine they must be re-run
on a quiet one before they are quoted as the product's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
from claude_agent_sdk import ResultMessage, query
from dsh_contract_tests.fixtures.messages import MessagesFixture, TextAnswer, keyless_claude_home
from dsh_contract_tests.fixtures.responses import PlainAnswer, ResponsesFixture
from dsh_subagent import ProductProvider, SubagentService
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider

from bench.bench_claude import official_options
from bench.bench_codex import ANSWER, TASK, CodexHome, codex_home, official_once, start_request
from bench.bench_common import clock, interleave_many, temp_root

__all__ = ["main", "run_p10"]

TARGET = 0.5
BATCH_CONCURRENCY = 4
PRODUCTS = ("codex", "claude-code", "codex-acp")


async def _to_result(
    service: SubagentService, name: str, workspace: Path, enqueue: Callable[[], None]
) -> float:
    """Task submitted → result in hand (the dispose that follows is not timed)."""
    enqueue()
    pool = service.ready_pool(name)
    if pool is not None:
        await pool.wait_ready()  # the steady state: a product is ready when the task comes
    started = clock()
    run = await service.start(name, start_request(workspace, TASK))
    try:
        result = await run.result()
        elapsed = clock() - started
    finally:
        await run.dispose()
    if result.stop_reason != "completed" or not result.text.endswith(ANSWER):
        raise RuntimeError(f"{name}: {result.stop_reason} {result.diagnostic}")
    return elapsed


def _idle_rss(service: SubagentService, name: str) -> float:
    pool = service.ready_pool(name)
    assert pool is not None
    totals = []
    for child in pool.idle:
        rss = 0
        for pid in child.process.tree_pids():
            try:
                rss += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
        totals.append(rss)
    return statistics.median(totals) / 2**20


async def _sides(
    service: SubagentService,
    providers: tuple[ProductProvider[Any], ProductProvider[Any]],
    workspace: Path,
    enqueue: Callable[[], None] = lambda: None,
) -> tuple[Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]:
    ready, cold = providers
    for provider in providers:
        service.register_provider(provider)
    assert service.keep_ready(ready.name, str(workspace))

    async def on_ready() -> float:
        return await _to_result(service, ready.name, workspace, enqueue)

    async def on_cold() -> float:
        return await _to_result(service, cold.name, workspace, enqueue)

    return on_ready, on_cold


def _paired(samples: dict[str, list[float]], over: str, under: str) -> float:
    """The median of the per-round ratios (each round's sides ran back to back, so a
    load change between rounds cancels out of each ratio)."""
    return statistics.median(a / b for a, b in zip(samples[over], samples[under], strict=True))


def _row(product: str, samples: dict[str, list[float]], rss_mib: float) -> dict[str, Any]:
    medians = {side: statistics.median(values) for side, values in samples.items()}
    row: dict[str, Any] = {
        "product": product,
        "n": len(samples["ready"]),
        "median_s": medians,
        "ready/cold": medians["ready"] / medians["cold"],
        "ready/cold paired": _paired(samples, "ready", "cold"),
        "idle_rss_mib_per_ready_product": rss_mib,
        "loadavg_after": os.getloadavg(),
    }
    if "official" in medians:
        row["ready/official"] = medians["ready"] / medians["official"]
        row["ready/official paired"] = _paired(samples, "ready", "official")
        row["cold/official"] = medians["cold"] / medians["official"]
        row["target ready/official <= 0.5 met"] = row["ready/official"] <= TARGET
    return row


async def _codex(rounds: int, root: Path) -> dict[str, Any]:
    with ResponsesFixture() as fixture:
        ours: CodexHome = codex_home(root / "ours", fixture.base_url)
        official_home = codex_home(root / "official", fixture.base_url)
        async with SubagentService() as service:
            pair = (ours.provider("ready", warm=1), ours.provider("cold"))
            on_ready, on_cold = await _sides(
                service, pair, ours.workspace, lambda: fixture.enqueue(PlainAnswer(ANSWER))
            )

            async def official() -> float:
                return await official_once(official_home, fixture)

            a, b, c = await interleave_many(2, rounds, (on_ready, on_cold, official))
            await service.ready_pool("ready").wait_ready()  # type: ignore[union-attr]
            rss = _idle_rss(service, "ready")
    return _row("Codex", {"ready": a, "cold": b, "official": c}, rss)


async def _claude(rounds: int, root: Path) -> dict[str, Any]:
    with MessagesFixture(default=TextAnswer(ANSWER)) as fixture:
        homes = [keyless_claude_home(_mkdir(root / side), fixture.base_url) for side in "ab"]
        ours, sdk = homes
        async with SubagentService() as service:
            pair = (
                ClaudeCodeProvider(ClaudeCodeConfig(provider_name="ready", env=ours.env, warm=1)),
                ClaudeCodeProvider(ClaudeCodeConfig(provider_name="cold", env=ours.env)),
            )
            on_ready, on_cold = await _sides(service, pair, ours.workspace)

            async def official() -> float:
                started = clock()
                answer = None
                async for message in query(prompt=TASK, options=official_options(sdk)):
                    if isinstance(message, ResultMessage):
                        answer = message.result
                if answer != ANSWER:
                    raise RuntimeError("query() did not return the answer")
                return clock() - started

            a, b, c = await interleave_many(1, rounds, (on_ready, on_cold, official))
            await service.ready_pool("ready").wait_ready()  # type: ignore[union-attr]
            rss = _idle_rss(service, "ready")
    return _row("Claude Code", {"ready": a, "cold": b, "official": c}, rss)


async def _codex_acp(rounds: int, root: Path) -> dict[str, Any] | None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from acp_agent import install_codex_acp

    try:
        command = install_codex_acp()
    except RuntimeError:
        return None
    from dsh_contract_tests.fixtures.responses import codex_keyless_env, write_codex_config

    with ResponsesFixture() as fixture:
        env = codex_keyless_env(root / "acp")
        write_codex_config(
            env["CODEX_HOME"],
            fixture.base_url,
            approval_policy="never",
            sandbox_mode="danger-full-access",
        )
        workspace = root / "acp" / "workspace"
        workspace.mkdir()

        def provider(name: str, warm: int) -> AcpProvider:
            return AcpProvider(
                AcpConfig(
                    provider_name=name,
                    command=command,
                    args=("-c", "features.shell_snapshot=false"),
                    env={**env, "RUST_LOG": "warn"},
                    dispose_eof_grace=0.2,
                    warm=warm,
                )
            )

        async with SubagentService() as service:
            on_ready, on_cold = await _sides(
                service,
                (provider("ready", 1), provider("cold", 0)),
                workspace,
                lambda: fixture.enqueue(PlainAnswer(ANSWER)),
            )
            a, b = await interleave_many(1, rounds, (on_ready, on_cold))
            await service.ready_pool("ready").wait_ready()  # type: ignore[union-attr]
            rss = _idle_rss(service, "ready")
    return _row("codex-acp", {"ready": a, "cold": b}, rss)


async def _batch_codex(tasks: int, warm: int, root: Path) -> float:
    """``tasks`` Codex delegations at concurrency 4 through one service: tasks per second."""
    with ResponsesFixture() as fixture:
        home = codex_home(_mkdir(root / f"batch-codex-{warm}-{clock()}"), fixture.base_url)
        provider = home.provider("codex", warm=warm)
        return await _batch(
            provider, home.workspace, tasks, lambda: fixture.enqueue(PlainAnswer(ANSWER))
        )


async def _batch_claude(tasks: int, warm: int, root: Path) -> float:
    """``tasks`` Claude Code delegations at concurrency 4 through one service: tasks per second."""
    with MessagesFixture(default=TextAnswer(ANSWER)) as fixture:
        home = keyless_claude_home(
            _mkdir(root / f"batch-claude-{warm}-{clock()}"), fixture.base_url
        )
        provider = ClaudeCodeProvider(
            ClaudeCodeConfig(provider_name="claude-code", env=home.env, warm=warm)
        )
        return await _batch(provider, home.workspace, tasks, lambda: None)


async def _batch(
    provider: ProductProvider[Any], workspace: Path, tasks: int, enqueue: Callable[[], None]
) -> float:
    async with SubagentService() as service:
        service.register_provider(provider)
        started = clock()
        # As dsh batch: the pool starts filling with the batch and is timed with it.
        service.keep_ready(provider.name, str(workspace))
        slots = anyio.Semaphore(BATCH_CONCURRENCY)

        async def one() -> None:
            async with slots:
                enqueue()
                run = await service.start(provider.name, start_request(workspace, TASK))
                try:
                    result = await run.result()
                finally:
                    await run.dispose()
                if not result.text.endswith(ANSWER):
                    raise RuntimeError(f"batch task: {result.diagnostic}")

        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(one)
        return tasks / (clock() - started)


async def _batch_pairs(
    product: str,
    run: Callable[[int, int, Path], Awaitable[float]],
    tasks: int,
    pairs: int,
    root: Path,
) -> dict[str, Any]:
    """Cold and ready batches interleaved (the order alternates pair by pair)."""
    cold: list[float] = []
    ready: list[float] = []
    for index in range(pairs):
        order = ((0, cold), (BATCH_CONCURRENCY, ready))
        for warm, bucket in order if index % 2 == 0 else order[::-1]:
            bucket.append(await run(tasks, warm, root))
    return {
        "product": product,
        "tasks": tasks,
        "concurrency": BATCH_CONCURRENCY,
        "pairs": pairs,
        "cold_tasks_per_s": cold,
        "ready_tasks_per_s": ready,
        "ready/cold paired": statistics.median(r / c for r, c in zip(ready, cold, strict=True)),
        "loadavg_after": os.getloadavg(),
    }


async def run_p10(
    rounds: int, batch: int, pairs: int = 2, products: tuple[str, ...] = PRODUCTS
) -> dict[str, Any]:
    """Every P10 figure, with the load average before and after each part."""
    before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    with temp_root("p10") as root:
        if "codex" in products:
            rows.append(await _codex(rounds, root))
        if "claude-code" in products:
            rows.append(await _claude(rounds, root))
        if "codex-acp" in products:
            acp = await _codex_acp(rounds, root)
            if acp is not None:
                rows.append(acp)
        if batch:
            if "codex" in products:
                batches.append(await _batch_pairs("Codex", _batch_codex, batch, pairs, root))
            if "claude-code" in products:
                batches.append(await _batch_pairs("Claude Code", _batch_claude, batch, pairs, root))
    return {
        "loadavg_before": before,
        "loadavg_after": os.getloadavg(),
        "cpus": os.cpu_count(),
        "rows": rows,
        "batch": batches,
        "note": "measured on a shared, loaded machine: re-run on a quiet one before quoting",
    }


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_ready")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=2, help="interleaved batch pairs")
    parser.add_argument(
        "--products",
        default=",".join(PRODUCTS),
        help="comma-separated subset of " + ",".join(PRODUCTS),
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    products = tuple(name for name in args.products.split(",") if name)
    unknown = set(products) - set(PRODUCTS)
    if unknown:
        parser.error(f"--products: unknown {', '.join(sorted(unknown))}")
    report = anyio.run(run_p10, args.rounds, args.batch, args.pairs, products)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
