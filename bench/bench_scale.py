"""P5: 1, 2, 4, 8, 16 concurrent keyless Codex delegations through one ``SubagentService``.

Level 2 (= the cores of the reference machine) is added to the issue's 1, 4, 8, 16 so the
"linear up to the cores" part is measured directly.

Every concurrent slot is its own provider instance with its own CODEX_HOME (two
app-servers initialising one fresh CODEX_HOME at once race on its sqlite state), all
pointed at one loopback Responses fixture. Per batch: wall time (start of the first
delegation → the last one disposed), how many settled ``completed``, live descendants
right after (survivors), this process's peak RSS growth over the batch divided by the
batch size, and the tree's peak summed RSS.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import anyio
from dsh_contract_tests.fixtures.responses import PlainAnswer, ResponsesFixture
from dsh_subagent import SubagentService
from dsh_subprocess.testing import ProcessWatch

from bench.bench_codex import ANSWER, CodexHome, codex_home, start_request
from bench.bench_common import Profile, RssSampler, clock, temp_root

__all__ = ["ScaleRow", "run_p5"]

RSS_TARGET_MIB = 5.0
EFFICIENCY_TARGET = 0.8
_MIB = 2**20


@dataclass
class ScaleRow:
    """One concurrency level, over its repeats."""

    concurrency: int
    walls: list[float] = field(default_factory=list)
    completed: int = 0
    attempted: int = 0
    survivors: int = 0
    rss_growth_per_run_mib: list[float] = field(default_factory=list)
    tree_peak_mib: list[float] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def throughput(self) -> float:
        return self.concurrency / self.wall

    def as_json(self, base_throughput: float, cores: int) -> dict[str, Any]:
        speedup = self.throughput / base_throughput
        ideal = min(self.concurrency, cores)
        growth = statistics.median(self.rss_growth_per_run_mib)
        met = (
            self.completed == self.attempted
            and self.survivors == 0
            and growth <= RSS_TARGET_MIB
            and speedup >= EFFICIENCY_TARGET * ideal
        )
        return {
            "concurrency": self.concurrency,
            "wall_median_s": self.wall,
            "wall_min_s": min(self.walls),
            "wall_max_s": max(self.walls),
            "throughput_runs_per_s": self.throughput,
            "speedup_vs_1": speedup,
            "ideal_speedup": ideal,
            "settled_completed": self.completed,
            "attempted": self.attempted,
            "survivors": self.survivors,
            "harness_rss_growth_per_run_mib_median": growth,
            "tree_peak_rss_mib_median": statistics.median(self.tree_peak_mib),
            "target_met": met,
        }


async def _batch(
    service: SubagentService, homes: list[CodexHome], fixture: ResponsesFixture, n: int
) -> tuple[float, int, int, float, float]:
    watch = ProcessWatch()
    fixture.enqueue(*[PlainAnswer(ANSWER)] * n)
    outcomes: list[bool] = []

    async def one(index: int) -> None:
        run = await service.start(f"codex-{index}", start_request(homes[index].workspace))
        try:
            result = await run.result()
        finally:
            await run.dispose()
        outcomes.append(result.stop_reason == "completed" and result.text == ANSWER)

    with RssSampler(interval=0.02) as rss:
        started = clock()
        async with anyio.create_task_group() as group:
            for index in range(n):
                group.start_soon(one, index)
        wall = clock() - started
    survivors = len(watch.alive())
    return wall, sum(outcomes), survivors, rss.growth / n / _MIB, rss.peak_tree / _MIB


async def run_p5(profile: Profile) -> tuple[list[ScaleRow], dict[str, Any]]:
    """Warm every CODEX_HOME once (sequentially), then each level ``p5_repeats`` times."""
    top = max(profile.p5_levels)
    rows: list[ScaleRow] = []
    with temp_root("p5") as root, ResponsesFixture() as fixture:
        homes = [codex_home(root / f"slot-{i}", fixture.base_url) for i in range(top)]
        async with SubagentService() as service:
            for index, home in enumerate(homes):
                service.register_provider(home.provider(f"codex-{index}"))
            for index in range(top):
                fixture.enqueue(PlainAnswer(ANSWER))
                run = await service.start(f"codex-{index}", start_request(homes[index].workspace))
                try:
                    await run.result()
                finally:
                    await run.dispose()
            warm = RssSampler(tree=False).baseline
            for level in profile.p5_levels:
                row = ScaleRow(level)
                for _ in range(profile.p5_repeats):
                    wall, completed, survivors, growth, tree = await _batch(
                        service, homes, fixture, level
                    )
                    row.walls.append(wall)
                    row.completed += completed
                    row.attempted += level
                    row.survivors += survivors
                    row.rss_growth_per_run_mib.append(growth)
                    row.tree_peak_mib.append(tree)
                rows.append(row)
            end = RssSampler(tree=False).baseline
    cores = os.cpu_count() or 1
    meta = {
        "cores": cores,
        "harness_rss_after_warmup_mib": warm / _MIB,
        "harness_rss_after_all_levels_mib": end / _MIB,
        "rss_target_mib_per_run": RSS_TARGET_MIB,
        "efficiency_target": EFFICIENCY_TARGET,
    }
    return rows, meta
