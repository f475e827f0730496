"""``python -m reliability``: run the whole matrix and print one table."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
from dsh_subprocess.testing import become_subreaper

from reliability.badconfig import config_cases, run_config_case, run_task_case, task_cases
from reliability.cells import all_cells
from reliability.hostdeath import kill_host
from reliability.profiles import PROFILES, Profile
from reliability.runner import run_cell
from reliability.storm import run_storm

__all__ = ["Row", "main", "render_table", "run_all"]


@dataclass
class Row:
    """One line of the table."""

    section: str
    tried: int = 0
    settled: int = 0
    survivors: int = 0
    leaks: int = 0
    fd_leaks: int = 0
    known_findings: int = 0


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    # ACP agents inherit fd 2 and flood it; keep the terminal for the table.
    saved = os.dup(2)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


async def run_all(profile: Profile, root: Path, failures: list[str]) -> list[Row]:
    """Run every section; failing items are appended to ``failures``."""
    rows: dict[str, Row] = {}
    for index, cell in enumerate(all_cells()):
        row = rows.setdefault(
            f"fault matrix: {cell.provider}", Row(f"fault matrix: {cell.provider}")
        )
        cell_root = root / f"cell-{index}"
        cell_root.mkdir()
        report = await run_cell(cell, cell_root, profile)
        row.tried += 1
        row.settled += report.settled_correctly
        row.survivors += len(report.survivors)
        row.leaks += len(report.leaks)
        row.fd_leaks += report.fd_leak
        if cell.xfail:
            row.known_findings += 1
            if report.passed:
                failures.append(f"{cell.id}: known finding no longer reproduces (fixed?)")
        elif not report.passed:
            failures.append(report.explain())
    storm_root = root / "storm"
    storm_root.mkdir()
    storm = await run_storm(storm_root, profile.storm_runs, profile.storm_concurrency)
    rows["storm"] = Row(
        f"cancellation storm (seed {storm.seed}, RSS +{storm.rss_growth // 2**20} MiB)",
        storm.runs,
        storm.settled_correctly,
        len(storm.survivors),
        0,
        storm.fd_leak,
    )
    failures += storm.problems
    for how in (signal.SIGTERM, signal.SIGKILL):
        host_root = root / f"host-{how.name}"
        host_root.mkdir()
        host = await kill_host(host_root, how)
        rows[f"host {how.name}"] = Row(
            f"host death {how.name} ({len(host.tree)} processes)",
            1,
            int(host.passed),
            len(host.survivors),
        )
        if not host.passed:
            failures.append(f"host {how.name}: survivors {host.survivors}")
    bad = Row("bad config + input")
    for case in config_cases():
        case_root = root / f"config-{bad.tried}"
        case_root.mkdir()
        result = run_config_case(case, case_root)
        bad.tried += 1
        bad.settled += result.ok
        bad.survivors += result.started
        bad.known_findings += case.xfail is not None
        if not result.ok and case.xfail is None:
            failures.append(f"{case.id}: {result.detail}")
    for product, label, xfail in task_cases():
        result = await run_task_case(product, label, root)
        bad.tried += 1
        bad.settled += result.ok
        bad.survivors += result.started if xfail is None else 0
        bad.known_findings += xfail is not None
        if not result.ok and xfail is None:
            failures.append(f"{result.case_id}: {result.detail}")
    rows["bad"] = bad
    return list(rows.values())


def render_table(rows: list[Row], profile: Profile, seconds: float) -> str:
    head = (
        "section",
        "cells tried",
        "settled correctly",
        "survivors",
        "leaks",
        "fd leaks",
        "known findings",
    )
    body = [
        (
            r.section,
            str(r.tried),
            str(r.settled),
            str(r.survivors),
            str(r.leaks),
            str(r.fd_leaks),
            str(r.known_findings),
        )
        for r in rows
    ]
    total = Row("total")
    for r in rows:
        for name in ("tried", "settled", "survivors", "leaks", "fd_leaks", "known_findings"):
            setattr(total, name, getattr(total, name) + getattr(r, name))
    body.append(
        (
            "TOTAL",
            str(total.tried),
            str(total.settled),
            str(total.survivors),
            str(total.leaks),
            str(total.fd_leaks),
            str(total.known_findings),
        )
    )
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join(
        [
            f"reliability profile {profile.name}: {seconds:.0f} s",
            fmt(head),
            rule,
            *(fmt(line) for line in body),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m reliability``; exit status 1 when any item failed."""
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    os.environ["DSH_RELIABILITY_PROFILE"] = profile.name
    become_subreaper()
    failures: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dsh-reliability-") as tmp:
        root = Path(tmp)
        with _stderr_to(root / "products-stderr.log"):
            rows = anyio.run(run_all, profile, root, failures)
    print(render_table(rows, profile, time.monotonic() - started))
    if failures:
        print("\nFAILED:", *failures, sep="\n", file=sys.stderr)
        return 1
    return 0
