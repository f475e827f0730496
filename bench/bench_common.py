"""Shared machinery: profiles, paired A/B sampling, statistics, RSS sampling."""

from __future__ import annotations

import contextlib
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil

if TYPE_CHECKING:
    from dsh_subagent import SubagentResult
    from dsh_subagent.service import PublishedRun

__all__ = [
    "PROGRESS_TARGET",
    "Comparison",
    "Profile",
    "ProgressTally",
    "RssSampler",
    "Samples",
    "bootstrap_median_interval",
    "clock",
    "collect_progress",
    "interleave",
    "interleave_many",
    "progress_comparison",
    "ratio_rows",
    "temp_root",
]

clock = time.perf_counter

PROGRESS_TARGET = 1.01
"""Progress collection on / off: the paired ratio a run may cost at most."""


@dataclass(frozen=True)
class Profile:
    """How many samples each benchmark takes."""

    name: str
    warmup: int
    p1_pairs: int
    p1_breakdown: int
    p2_pairs: int
    p1_progress_pairs: int
    p2_progress_pairs: int
    p3_ours: int
    p3_claude_sdk: int
    p3_acp_default: int
    p4_pairs: int
    p5_levels: tuple[int, ...]
    p5_repeats: int
    p6_tasks: int
    p6_more_tasks: int
    """P6's second batch size: the per-task overhead is the slope between the two."""
    p6_repeats: int
    p6_latencies: tuple[float, ...]


QUICK = Profile(
    name="quick",
    warmup=1,
    p1_pairs=3,
    p1_breakdown=2,
    p2_pairs=2,
    p1_progress_pairs=3,
    p2_progress_pairs=2,
    p3_ours=2,
    p3_claude_sdk=1,
    p3_acp_default=0,
    p4_pairs=4,
    p5_levels=(1, 4),
    p5_repeats=1,
    p6_tasks=4,
    p6_more_tasks=16,
    p6_repeats=1,
    p6_latencies=(0.0, 1.0),
)
DEFAULT = Profile(
    name="default",
    warmup=2,
    p1_pairs=30,
    p1_breakdown=10,
    p2_pairs=20,
    p1_progress_pairs=80,
    p2_progress_pairs=40,
    p3_ours=5,
    p3_claude_sdk=3,
    p3_acp_default=2,
    p4_pairs=40,
    p5_levels=(1, 2, 4, 8, 16),
    p5_repeats=3,
    p6_tasks=8,
    p6_more_tasks=64,
    p6_repeats=2,
    p6_latencies=(0.0, 1.0),
)
PROFILES = {profile.name: profile for profile in (QUICK, DEFAULT)}


@dataclass(frozen=True)
class Samples:
    """Durations in seconds, summarised."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def as_json(self) -> dict[str, Any]:
        return {
            "n": len(self.values),
            "median_s": self.median,
            "min_s": self.low,
            "max_s": self.high,
            "samples_s": list(self.values),
        }


@dataclass
class Comparison:
    """One A/B row: our side against a reference side, sampled in interleaved pairs.

    ``ratio`` is the median of the per-pair ratios ``numerator / denominator`` where
    ``ratio_of`` says which side is which ("ours/reference" or "reference/ours").
    """

    benchmark: str
    case: str
    ours_label: str
    reference_label: str
    ours: Samples
    reference: Samples
    ratio_of: str
    target: str
    target_check: Callable[[float], bool] = field(repr=False)
    notes: list[str] = field(default_factory=list)

    def pair_ratios(self) -> list[float]:
        pairs = zip(self.ours.values, self.reference.values, strict=True)
        if self.ratio_of == "ours/reference":
            return [a / b for a, b in pairs]
        return [b / a for a, b in pairs]

    @property
    def ratio(self) -> float:
        return statistics.median(self.pair_ratios())

    @property
    def met(self) -> bool:
        return self.target_check(self.ratio)

    def as_json(self) -> dict[str, Any]:
        ratios = self.pair_ratios()
        return {
            "benchmark": self.benchmark,
            "case": self.case,
            "ours_label": self.ours_label,
            "reference_label": self.reference_label,
            "ours": self.ours.as_json(),
            "reference": self.reference.as_json(),
            "ratio_of": self.ratio_of,
            "paired_ratio_median": self.ratio,
            "paired_ratio_min": min(ratios),
            "paired_ratio_max": max(ratios),
            "target": self.target,
            "target_met": self.met,
            "notes": self.notes,
        }


async def interleave(
    warmup: int,
    pairs: int,
    first: Callable[[], Awaitable[float]],
    second: Callable[[], Awaitable[float]],
) -> tuple[list[float], list[float]]:
    """Run ``first`` and ``second`` alternately (A B A B …), warm-up pairs discarded."""
    a, b = await interleave_many(warmup, pairs, (first, second))
    return a, b


async def interleave_many(
    warmup: int, rounds: int, sides: Sequence[Callable[[], Awaitable[float]]]
) -> list[list[float]]:
    """Run every side once per round, in order (A B C A B C …), warm-up rounds discarded."""
    samples: list[list[float]] = [[] for _ in sides]
    for index in range(warmup + rounds):
        for side, bucket in zip(sides, samples, strict=True):
            value = await side()
            if index >= warmup:
                bucket.append(value)
    return samples


@contextlib.contextmanager
def temp_root(label: str) -> Iterator[Path]:
    """A temporary directory for one benchmark's product homes, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"dsh-bench-{label}-") as name:
        yield Path(name)


def _tree_rss() -> int:
    total = 0
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


class RssSampler:
    """Samples this process's RSS and its descendants' summed RSS in a thread; keeps peaks."""

    def __init__(self, interval: float = 0.01, *, tree: bool = True) -> None:
        self._interval = interval
        self._tree = tree
        self._me = psutil.Process()
        self.baseline = self._me.memory_info().rss
        self.peak_self = self.baseline
        self.peak_tree = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _sample(self) -> None:
        self.peak_self = max(self.peak_self, self._me.memory_info().rss)
        if self._tree:
            self.peak_tree = max(self.peak_tree, _tree_rss())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def growth(self) -> int:
        """Peak harness RSS minus the RSS when sampling began, in bytes."""
        return self.peak_self - self.baseline


@dataclass
class ProgressTally:
    """Events the "progress on" side saw, over all its runs (reported as a note)."""

    runs: int = 0
    read: int = 0
    heard: int = 0

    def note(self) -> str:
        if not self.runs:
            return "no progress run"
        return (
            f"progress events per run: {self.read / self.runs:.1f} read by the iterator, "
            f"{self.heard / self.runs:.1f} heard by the listener"
        )


async def collect_progress(run: PublishedRun, tally: ProgressTally) -> SubagentResult:
    """``run.result()`` while a consumer reads ``run.progress`` and a listener hears it.

    This is "progress on": what a host showing live progress does (an ``async for``
    over the stream in its own task, plus a listener); "off" is ``run.result()`` alone.
    """
    heard: list[object] = []
    remove = run.progress.add_listener(heard.append)
    read = 0

    async def reader() -> None:
        nonlocal read
        async for _event in run.progress:
            read += 1

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(reader)
            result = await run.result()
    finally:
        remove()
    tally.runs += 1
    tally.read += read
    tally.heard += len(heard)
    return result


async def progress_comparison(
    benchmark: str,
    provider_label: str,
    warmup: int,
    rounds: int,
    off: Callable[[], Awaitable[float]],
    on: Callable[[ProgressTally], Awaitable[float]],
) -> Comparison:
    """The progress on/off row: its own interleaved rounds, host CPU time noted.

    The order alternates per round (off-on, on-off, ...) so neither side always runs
    right after the other; the target is tight (1 %), so position bias matters. Progress
    collection can only cost host work (the product does the same either way), so the
    host process's CPU time per run is recorded beside the wall time: it is the noise-free
    view of the same cost.
    """
    tally = ProgressTally()
    return await on_off_comparison(
        benchmark,
        "progress collection on (iterator + listener) vs off",
        (f"{provider_label}, run.progress read", "same, nobody reading progress"),
        warmup,
        rounds,
        off,
        lambda: on(tally),
        [tally.note()],
    )


async def on_off_comparison(
    benchmark: str,
    case: str,
    labels: tuple[str, str],
    warmup: int,
    rounds: int,
    off: Callable[[], Awaitable[float]],
    on: Callable[[], Awaitable[float]],
    notes: Sequence[str] = (),
) -> Comparison:
    """A feature on versus off, same delegation: interleaved rounds, host CPU time noted.

    The order alternates per round (off-on, on-off, ...) so neither side always runs
    right after the other; the 1 % target makes position bias matter. A host-side
    feature can only cost host work, so the host process's CPU time per run is the
    noise-free view of its cost; ``notes`` are prepended to the row's notes.
    """
    walls: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}

    async def side(name: str) -> tuple[float, float]:
        cpu = time.process_time()
        wall = await (off() if name == "off" else on())
        return wall, time.process_time() - cpu

    for index in range(warmup + rounds):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")
        for name in order:
            wall, cpu = await side(name)
            if index >= warmup:
                walls[name].append(wall)
                cpus[name].append(cpu)
    cpu_on, cpu_off = statistics.median(cpus["on"]), statistics.median(cpus["off"])
    ratios = [a / b for a, b in zip(walls["on"], walls["off"], strict=True)]
    low, high = bootstrap_median_interval(ratios)
    return Comparison(
        benchmark=benchmark,
        case=case,
        ours_label=labels[0],
        reference_label=labels[1],
        ours=Samples(tuple(walls["on"])),
        reference=Samples(tuple(walls["off"])),
        ratio_of="ours/reference",
        target=f"≤ {PROGRESS_TARGET:.2f}",
        target_check=lambda ratio: ratio <= PROGRESS_TARGET,
        notes=[
            *notes,
            f"host CPU per run (median): on {cpu_on * 1000:.1f} ms, off {cpu_off * 1000:.1f} ms",
            f"95 % bootstrap interval of the paired-ratio median: {low:.3f}–{high:.3f}",
        ],
    )


def bootstrap_median_interval(
    values: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval for the median of ``values``.

    It says whether a row's sample count resolves its target at all: with per-run noise
    of ±15 %, 80 pairs leave the median uncertain by about ±3 %, wider than a 1 % target.
    """
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def ratio_rows(
    benchmark: str,
    ours_label: str,
    reference_label: str,
    reference: Sequence[float],
    cases: Sequence[tuple[str, Sequence[float]]],
    target: float,
) -> list[Comparison]:
    """One "ours/reference ≤ target" row per ``(case, our samples)`` against one reference."""
    return [
        Comparison(
            benchmark=benchmark,
            case=case,
            ours_label=ours_label,
            reference_label=reference_label,
            ours=Samples(tuple(samples)),
            reference=Samples(tuple(reference)),
            ratio_of="ours/reference",
            target=f"≤ {target:.2f}",
            target_check=lambda ratio: ratio <= target,
        )
        for case, samples in cases
    ]


async def instrumentation_comparison(
    benchmark: str,
    provider_label: str,
    warmup: int,
    rounds: int,
    run: Callable[[], Awaitable[float]],
) -> Comparison:
    """The same delegation with dsh-otel instrumenting it (SDK providers, in-memory
    exporters, every span and metric recorded) versus not instrumented at all."""
    import dsh_otel
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrumented = 0

    async def on() -> float:
        nonlocal instrumented
        with dsh_otel.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider):
            wall = await run()
        instrumented += 1
        return wall

    try:
        row = await on_off_comparison(
            benchmark,
            "OpenTelemetry instrumentation on (dsh-otel, SDK, in-memory export) vs off",
            (f"{provider_label}, dsh_otel.instrument()", "same, not instrumented"),
            warmup,
            rounds,
            run,
            on,
        )
        recorded = len(spans.get_finished_spans())
        row.notes.insert(0, f"{recorded} spans recorded over {instrumented} instrumented runs")
        return row
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
