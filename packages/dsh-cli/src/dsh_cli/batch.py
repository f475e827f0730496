"""``dsh batch``: the command over the batch engine (:mod:`dsh_batch`): its checks in
command-line terms, its lines on stderr and its exit status.

``dsh batch PROFILE TARGET tasks.jsonl --out results.jsonl`` runs every task of the file
(see :mod:`dsh_batch.files`) on one provider instance, at most ``--concurrency`` at a
time, and appends one record per task to the results file as each settles. The latest
record per id counts: ids already in the results file are skipped, so running the same
command again resumes an interrupted batch, and ``--retry-failed`` also runs the ids
whose latest record is not ``completed``. Everything that can be checked before the
first task is checked first (:mod:`dsh_batch.checks`), and the results file is held
under an exclusive lock for the whole batch. Ctrl-C (or SIGTERM) cancels every run and
exits 130 once every product's process tree is gone; runs cancelled that way are not
recorded (they run again on resume). ``--ray [ADDRESS]`` runs the same batch on Ray
(:mod:`dsh_batch.ray_pool`).

Exit status: ``0`` every task completed and every line was good · ``1`` a task did not
complete, a line was bad, or the batch failed outside a task · ``2`` usage or profile
error, or another batch holds the results file (nothing started, nothing recorded) ·
``130`` interrupted.

A profile may name files of the batch as ``${DSH_FILES}`` (only in ``dsh batch``): it
stands for ``--files DIR`` here, and for the copy of that directory Ray unpacked on each
node with ``--ray``.

The batch takes the path ``run_batch`` takes (:mod:`dsh_batch.prepare`'s checks in the
command's words, then :class:`dsh_batch.runner.BatchRun` with ``handle_signals=True``);
this module reads the flags and the task file and renders the lines and the exit status.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from dsh_batch.engine import Summary
from dsh_batch.files import ResultsFile, TaskList, read_tasks
from dsh_batch.prepare import COMMAND_WORDING, check_places, load_setup
from dsh_batch.runner import BatchRun
from dsh_batch.schema import with_output_schema
from dsh_profiles.confinement import announce_confinement
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.isolation import worktree_from_flags
from dsh_profiles.loader import Composition
from dsh_profiles.options import budget_from
from dsh_worktree import Worktree

from dsh_cli.batch_progress import BatchDisplay

__all__ = ["cmd_batch"]


def cmd_batch(
    args: argparse.Namespace, out: TextIO, err: TextIO, discovery: ProviderDiscovery | None
) -> int:
    """Run ``dsh batch``; returns the exit status (usage problems raise ``DshProfilesError``).

    Everything that can be checked before the first task is (:mod:`dsh_batch.checks`),
    and the results file is held under an exclusive lock for the whole batch; a problem
    found on the way is one usage error with nothing started and nothing recorded.
    """
    places = check_places(
        args.files,
        args.cwd,
        on_ray=args.ray is not None,
        out=args.out,
        tasks_path=args.tasks,
        profile=args.profile,
        wording=COMMAND_WORDING,
    )
    budget = budget_from(args)
    task_list = with_output_schema(read_tasks(args.tasks), args.output_schema)

    def announce(composition: Composition, provider: str) -> None:
        announce_confinement([composition.provider(provider).provider], err)

    def flags(composition: Composition, provider: str) -> Worktree | None:
        return worktree_from_flags(composition, provider, args)

    setup = load_setup(
        args.profile,
        args.target,
        task_list.tasks,
        places,
        wording=COMMAND_WORDING,
        instance=args.instance,
        budget=budget,
        concurrency=args.concurrency,
        retry_failed=args.retry_failed,
        confinement=args.confinement,
        warm=args.warm,
        worktree=flags,
        ray=False if args.ray is None else args.ray or True,
        ray_retries=args.ray_retries,
        discovery=discovery,
        announce=announce,
        line_of=task_list.line_of,
        tasks_name=args.tasks,
    )
    results = ResultsFile(args.out)
    with BatchRun(setup, results) as batch:
        _report_plan(args, task_list, batch, err)
        batch.check()
        bad = len(task_list.bad_lines)
        summary = Summary(0, 0, False, 0)
        if batch.todo:
            with BatchDisplay(len(batch.todo), err) as display:
                summary = batch.run(observer=display.event, handle_signals=True)
        return _report(summary, bad, args.out, results, err)


def _report_plan(
    args: argparse.Namespace, task_list: TaskList, batch: BatchRun, err: TextIO
) -> None:
    """What is skipped and what runs (the tasks are the runner's choice)."""
    assert batch.results is not None
    for line_no in batch.results.unreadable:
        print(f"dsh: {args.out} line {line_no}: not a result record; ignored", file=err)
    for line in task_list.bad_lines:
        print(f"dsh: {args.tasks} line {line.line_no}: {line.reason}; skipped", file=err)
    total, running = len(task_list.tasks), len(batch.todo)
    if args.retry_failed:
        if batch.skipped or batch.again:
            note = f" ({batch.again} again after a failed record)" if batch.again else ""
            print(
                f"dsh: {batch.skipped} of {total} tasks already completed in {args.out}; "
                f"running {running}{note}",
                file=err,
            )
    elif batch.skipped:
        failed = batch.skipped_failed
        note = f" ({failed} of them failed; --retry-failed runs those again)" if failed else ""
        print(
            f"dsh: {batch.skipped} of {total} tasks already in {args.out}{note}; running {running}",
            file=err,
        )


def _report(summary: Summary, bad: int, out_path: str, results: ResultsFile, err: TextIO) -> int:
    parts = [f"{summary.done} completed", f"{summary.failed} failed"]
    if bad:
        parts.append(f"{bad} bad line{'s' if bad != 1 else ''} skipped")
    if summary.not_run:
        parts.append(f"{summary.not_run} not recorded")
    totals = results.usage.describe()
    tail = f"; {totals}" if totals else ""
    # A results file this batch created and never wrote to is removed at close.
    where = f"results in {out_path}" if results.kept else f"nothing written to {out_path}"
    print(f"dsh: batch: {', '.join(parts)}; {where}{tail}", file=err)
    if summary.error is not None:
        print(f"dsh: batch failed: {summary.error}", file=err)
    elif summary.interrupted:
        print("dsh: batch interrupted; run the same command again to resume", file=err)
    return summary.exit_code(bad)
