"""Smoke test: the documented command runs the quick P4 profile and reports in the agreed shape.

No timing is asserted (machines are noisy); only that the command works end to end, the
JSON and the markdown carry every field a reader relies on, and nothing was left running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_p4_runs_and_reports_its_shape(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "P4", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["meta"]["profile"] == "quick"
    assert report["meta"]["selected"] == ["P4"]
    assert set(report["results"]) == {"P4"}
    p4 = report["results"]["P4"]
    assert p4["error"] is None
    assert p4["survivors"] == []
    rows = p4["rows"]
    assert [row["case"].rsplit(", ", 1)[-1] for row in rows] == [
        "host-death guard on (default)",
        "host-death guard off",
    ]
    for row in rows:
        assert row["ratio_of"] == "reference/ours"
        assert isinstance(row["target_met"], bool)
        for side in ("ours", "reference"):
            summary = row[side]
            assert summary["n"] == len(summary["samples_s"]) > 0
            assert summary["min_s"] <= summary["median_s"] <= summary["max_s"]
            assert all(value > 0 for value in summary["samples_s"])
        pairs = zip(row["ours"]["samples_s"], row["reference"]["samples_s"], strict=True)
        ratios = [r / o for o, r in pairs]
        assert min(ratios) <= row["paired_ratio_median"] <= max(ratios)
    assert "| P4 harness overhead | start→result→dispose, host-death guard on" in done.stdout
    assert f"JSON: {out}" in done.stdout


def test_unknown_benchmark_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "P9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "unknown benchmark(s) P9" in done.stderr


def test_progress_pairs_must_be_a_positive_integer() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "P1", "--progress-pairs", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "--progress-pairs: expected a positive integer, got '0'" in done.stderr


def test_bootstrap_interval_brackets_the_median_and_narrows_with_more_samples() -> None:
    from bench.bench_common import bootstrap_median_interval

    noisy = [1.0 + 0.15 * ((index * 37) % 21 - 10) / 10 for index in range(80)]
    low, high = bootstrap_median_interval(noisy)
    wide_low, wide_high = bootstrap_median_interval(noisy[:20])
    assert low <= sorted(noisy)[40] <= high
    assert high - low < wide_high - wide_low
    assert bootstrap_median_interval([1.0] * 5) == (1.0, 1.0)


def test_every_benchmark_module_imports_as_python_m_bench_sees_them() -> None:
    """``python -m bench`` has only the repository root on its path (not pytest's)."""
    modules = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))
    code = "; ".join(f"import bench.{name}" for name in modules)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert len(modules) >= 8
    assert done.returncode == 0, done.stderr
