"""Markdown rendering of one bench run (the JSON file carries the same data, and more)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_markdown"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _spread(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "—"
    return (
        f"{_ms(summary['median_s'])} ({_ms(summary['min_s'])}–{_ms(summary['max_s'])}, "
        f"n={summary['n']})"
    )


def _met(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "**no**")


def _comparisons(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| Benchmark | Case | Ours: median (min–max) | Reference | Reference: median (min–max) "
        "| Paired ratio median (min–max) | Target | Met | Notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['benchmark']} | {row['case']} | {_spread(row['ours'])} "
            f"| {row['reference_label']} | {_spread(row['reference'])} "
            f"| {row['paired_ratio_median']:.3f} ({row['paired_ratio_min']:.2f}–"
            f"{row['paired_ratio_max']:.2f}) {row['ratio_of']} | {row['target']} "
            f"| {_met(row['target_met'])} | {'; '.join(row.get('notes', []))} |"
        )
    return lines


def _breakdown(data: dict[str, Any]) -> list[str]:
    ours: dict[str, float] = data["ours_median_s"]
    unguarded: dict[str, float] = data["ours_guard_off_median_s"]
    official: dict[str, float] = data["official_median_s"]
    lines = [
        f"P1 phase breakdown (median of {data['n']} probed runs per side, interleaved):",
        "",
        "| Phase | Ours | Ours, guard off (diagnostic) | Official SDK |",
        "|---|---|---|---|",
    ]
    for phase, seconds in ours.items():
        theirs = official.get(phase)
        lines.append(
            f"| {phase} | {_ms(seconds)} | {_ms(unguarded[phase])} "
            f"| {'—' if theirs is None else _ms(theirs)} |"
        )
    return lines


def _cancellation(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| Product | Side | cancel → aborted | cancel → whole tree gone | Target | Met | Notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['product']} | {row['side']} | {_spread(row['cancel_to_aborted'])} "
            f"| {_spread(row['cancel_to_tree_gone'])} | ≤ 250 ms | {_met(row['target_met'])} "
            f"| {'; '.join(row['notes'])} |"
        )
    return lines


def _scale(data: dict[str, Any]) -> list[str]:
    lines = [
        f"P5 on {data['meta']['cores']} cores (each level repeated; medians):",
        "",
        "| Concurrent | Wall median (min–max) | Completed | Survivors | Runs/s "
        "| Speedup vs 1 (ideal) | Harness RSS growth per run | Tree peak RSS | Met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        lines.append(
            f"| {row['concurrency']} | {_ms(row['wall_median_s'])} ({_ms(row['wall_min_s'])}–"
            f"{_ms(row['wall_max_s'])}) | {row['settled_completed']}/{row['attempted']} "
            f"| {row['survivors']} | {row['throughput_runs_per_s']:.2f} "
            f"| {row['speedup_vs_1']:.2f} ({row['ideal_speedup']}) "
            f"| {row['harness_rss_growth_per_run_mib_median']:.2f} MiB "
            f"| {row['tree_peak_rss_mib_median']:.0f} MiB | {_met(row['target_met'])} |"
        )
    meta = data["meta"]
    lines += [
        "",
        f"Harness RSS after warm-up {meta['harness_rss_after_warmup_mib']:.1f} MiB, after all "
        f"levels {meta['harness_rss_after_all_levels_mib']:.1f} MiB. Met = every run completed, "
        f"0 survivors, RSS growth ≤ {meta['rss_target_mib_per_run']} MiB per run and speedup ≥ "
        f"{meta['efficiency_target']} × ideal (ideal = min(concurrency, cores)).",
    ]
    return lines


def _batch(data: dict[str, Any]) -> list[str]:
    meta = data["meta"]
    lines = [
        f"P6 batch: {meta['tasks']} and {meta['more_tasks']} keyless Codex tasks, "
        f"{meta['repeats']} repeat(s), "
        f"{meta['cpu_count']} CPUs (medians):",
        "",
        "| Case | Wall median (all) | Task elapsed median | Completed | Note |",
        "|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        if row["wall_median_s"] is None:
            lines.append(f"| {row['case']} | — | — | — | {row['note']} |")
            continue
        walls = ", ".join(_ms(wall) for wall in row["walls_s"])
        lines.append(
            f"| {row['case']} | {_ms(row['wall_median_s'])} ({walls}) "
            f"| {_ms(row['task_elapsed_median_s'])} | {row['completed']}/{row['attempted']} "
            f"| {row['note']} |"
        )
    lines += [
        "",
        f"`dsh batch` with nothing to run (start-up, profile, results scan): "
        f"{_ms(meta['dsh_batch_nothing_to_run_s'])}.",
        "",
    ]
    for entry in meta["per_latency"]:

        def cost(key: str, entry: dict[str, Any] = entry) -> str:
            value = entry[key]
            return "—" if value is None else f"{value * 1000:.0f} ms"

        lines.append(
            f"* model {entry['model_latency_s']:g} s: throughput ratio dsh batch / sequential "
            f"API {entry['throughput_ratio_batch_over_sequential']:.2f}; over the local batch, "
            f"per task / fixed per batch: actor pool {cost('ray_pool_overhead_per_task_s')} / "
            f"{cost('ray_pool_fixed_s')}, Ray Data {cost('ray_data_overhead_per_task_s')} / "
            f"{cost('ray_data_fixed_s')}"
        )
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The whole run as markdown tables."""
    meta = report["meta"]
    lines = [
        f"## dsh-python bench — profile `{meta['profile']}` — {meta['started_at']}",
        "",
        f"Host: {meta['cores']} cores, Python {meta['python']}, backend asyncio. "
        f"Load average at start {meta['load_start']}, at end {meta['load_end']}; "
        f"total {meta['total_s']:.0f} s.",
        "",
    ]
    results = report["results"]
    comparisons = [
        row for key in ("P1", "P2", "P4", "P7") for row in results.get(key, {}).get("rows", [])
    ]
    if comparisons:
        lines += [
            "A/B runs are interleaved (A B A B …) after warm-up; the ratio is the median of "
            "the per-pair ratios.",
            "",
            *_comparisons(comparisons),
            "",
        ]
    if "breakdown" in results.get("P1", {}):
        lines += [*_breakdown(results["P1"]["breakdown"]), ""]
    if results.get("P3", {}).get("rows"):
        lines += ["P3 cancellation mid-turn:", "", *_cancellation(results["P3"]["rows"]), ""]
    if results.get("P5", {}).get("rows"):
        lines += [*_scale(results["P5"]), ""]
    if results.get("P6", {}).get("rows"):
        lines += [*_batch(results["P6"]), ""]
    lines += [
        "| Benchmark | Duration | Load avg after | Survivors | Error |",
        "|---|---|---|---|---|",
    ]
    for key, result in results.items():
        survivors = result.get("survivors", [])
        lines.append(
            f"| {key} | {result.get('duration_s', 0.0):.0f} s | {result.get('load_after', '')} "
            f"| {len(survivors)}{' (' + ', '.join(survivors) + ')' if survivors else ''} "
            f"| {result.get('error') or ''} |"
        )
    return "\n".join(lines) + "\n"
