"""The ``python -m bench`` command: run the selected benchmarks, print markdown, write JSON."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from dsh_subprocess.testing import ProcessWatch, become_subreaper

from bench.bench_common import DEFAULT, PROFILES, QUICK, Profile
from bench.bench_report import render_markdown

__all__ = ["BENCHMARKS", "main", "run"]

BENCHMARKS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7")
RESULTS_DIR = Path(__file__).resolve().parent / "results"
_SURVIVOR_GRACE_SECONDS = 1.0


def _load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


async def _p1(profile: Profile) -> dict[str, Any]:
    from bench.bench_codex import run_p1

    comparisons, breakdown = await run_p1(profile)
    return {"rows": [row.as_json() for row in comparisons], "breakdown": breakdown}


async def _p2(profile: Profile) -> dict[str, Any]:
    from bench.bench_claude import run_p2

    return {"rows": [row.as_json() for row in await run_p2(profile)]}


async def _p3(profile: Profile) -> dict[str, Any]:
    from bench.bench_cancel import run_p3

    return {"rows": [row.as_json() for row in await run_p3(profile)]}


async def _p4(profile: Profile) -> dict[str, Any]:
    from bench.bench_overhead import run_p4

    return {"rows": [row.as_json() for row in await run_p4(profile)]}


async def _p5(profile: Profile) -> dict[str, Any]:
    from bench.bench_scale import run_p5

    rows, meta = await run_p5(profile)
    base = rows[0].throughput
    return {"rows": [row.as_json(base, meta["cores"]) for row in rows], "meta": meta}


async def _p6(profile: Profile) -> dict[str, Any]:
    from bench.bench_batch import run_p6

    rows, meta = await run_p6(profile)
    return {"rows": [row.as_json() for row in rows], "meta": meta}


async def _p7(profile: Profile) -> dict[str, Any]:
    from bench.bench_worktree import run_p7

    return {"rows": [row.as_json() for row in await run_p7(profile)]}


_RUNNERS: dict[str, Callable[[Profile], Awaitable[dict[str, Any]]]] = {
    "P1": _p1,
    "P2": _p2,
    "P3": _p3,
    "P4": _p4,
    "P5": _p5,
    "P6": _p6,
    "P7": _p7,
}


async def run(profile: Profile, selected: tuple[str, ...]) -> dict[str, Any]:
    """Run ``selected`` benchmarks in order; one failing benchmark does not stop the rest."""
    started = time.monotonic()
    meta: dict[str, Any] = {
        "profile": profile.name,
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "load_start": _load(),
        "selected": list(selected),
    }
    results: dict[str, dict[str, Any]] = {}
    for key in selected:
        begun = time.monotonic()
        watch = ProcessWatch()
        try:
            result = await _RUNNERS[key](profile)
            result["error"] = None
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        # Every product process of the benchmark must be gone by now; anything left is
        # reported and then killed, so the next benchmark starts clean.
        watch.wait_gone(_SURVIVOR_GRACE_SECONDS)
        result["survivors"] = watch.kill_leftovers()
        result["duration_s"] = time.monotonic() - begun
        result["load_after"] = _load()
        results[key] = result
        print(f"bench: {key} done in {result['duration_s']:.1f} s", file=sys.stderr)
    meta["load_end"] = _load()
    meta["total_s"] = time.monotonic() - started
    return {"meta": meta, "results": results}


def _selection(text: str | None) -> tuple[str, ...]:
    if not text:
        return BENCHMARKS
    chosen = tuple(part.strip().upper() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"bench: unknown benchmark(s) {', '.join(unknown)}; choose from P1–P7")
    return chosen


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the markdown table, write the JSON file.

    Returns:
        0 when every selected benchmark ran and left no survivor, else 1. Missed
        performance targets do not change the exit status: they are findings.
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Measure dsh-python against the official SDKs (see bench/README.md).",
    )
    parser.add_argument("--quick", action="store_true", help="smoke profile (few samples)")
    parser.add_argument("--only", help="comma-separated subset, e.g. P1,P4")
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write the JSON results (default: bench/results/bench-<time>.json)",
    )
    parser.add_argument(
        "--progress-pairs",
        type=_positive,
        metavar="N",
        help="rounds for the P1 and P2 progress on/off rows (the profile's otherwise); "
        "resolving a 1 %% difference on a noisy machine takes a few hundred",
    )
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else DEFAULT
    if args.progress_pairs is not None:
        profile = dataclasses.replace(
            profile, p1_progress_pairs=args.progress_pairs, p2_progress_pairs=args.progress_pairs
        )
    assert profile.name in PROFILES
    selected = _selection(args.only)
    become_subreaper()
    # The official openai-codex SDK (AsyncCodex) and the acp library need asyncio; both
    # sides of every comparison therefore run on the asyncio backend.
    report = anyio.run(run, profile, selected, backend="asyncio")
    path: Path = args.json or RESULTS_DIR / (
        "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(render_markdown(report))
    sys.stdout.write(f"\nJSON: {path}\n")
    failed = any(r["error"] or r["survivors"] for r in report["results"].values())
    return 1 if failed else 0
