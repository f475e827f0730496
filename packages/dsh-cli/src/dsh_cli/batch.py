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
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Final, TextIO

import anyio
from dsh_batch.checks import check_base, check_out_path, check_task_cwds
from dsh_batch.engine import (
    FILES_PLACEHOLDER,
    BatchPlan,
    Interrupts,
    Summary,
    default_concurrency,
    load_batch_profile,
    select_tasks,
    task_cwd,
)
from dsh_batch.files import BatchTask, ResultsFile, TaskList, read_tasks
from dsh_batch.local import run_local
from dsh_batch.schema import typed_row_schema, with_output_schema, with_schema
from dsh_profiles.confinement import announce_confinement
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import (
    check_branch_count,
    check_isolation,
    isolate_from_flags,
    worktree_from_flags,
)
from dsh_profiles.loader import Composition
from dsh_profiles.options import budget_from, resolve_target
from dsh_profiles.warm import batch_warm
from dsh_subagent import CancelController

from dsh_cli.batch_progress import BatchDisplay

__all__ = ["cmd_batch"]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


def cmd_batch(
    args: argparse.Namespace, out: TextIO, err: TextIO, discovery: ProviderDiscovery | None
) -> int:
    """Run ``dsh batch``; returns the exit status (usage problems raise ``DshProfilesError``).

    Everything that can be checked before the first task is (:mod:`dsh_batch.checks`),
    and the results file is held under an exclusive lock for the whole batch; a problem
    found on the way is one usage error with nothing started and nothing recorded.
    """
    files = None
    if args.files is not None:
        files = os.path.abspath(args.files)
        if not os.path.isdir(files):
            raise UsageError(f"--files {args.files!r} is not a directory")
    base: str | None = None
    if args.ray is None:
        base = check_base(args.cwd)
    elif args.cwd is not None and not os.path.isabs(args.cwd):
        raise UsageError("with --ray, --cwd must be an absolute path on the worker nodes")
    budget = budget_from(args)
    check_out_path(args.out, args.tasks, args.profile)
    task_list = with_output_schema(read_tasks(args.tasks), args.output_schema)
    composition = load_batch_profile(
        args.profile,
        files,
        discovery=discovery,
        confinement=args.confinement,
        warm=batch_warm(args.warm, args.concurrency or default_concurrency()),
    )
    provider = resolve_target(composition, args.target, args.instance)
    task_list = with_schema(task_list, typed_row_schema(composition, args.target, args.instance))
    if args.ray is None:  # with --ray each node decides for itself, at each task's start
        announce_confinement([composition.provider(provider).provider], err)
    # With --ray the settings travel to the actors, which isolate on their nodes; the
    # flags are checked here either way.
    worktree = worktree_from_flags(composition, provider, args) if args.ray is not None else None
    # A bounded batch reuses its worktrees: a pool as large as its concurrency.
    warm = args.concurrency or default_concurrency()
    composition = isolate_from_flags(composition, provider, args, warm=warm)
    settings = worktree if worktree is not None else composition.provider(provider).worktree
    results = ResultsFile(args.out)
    results.open()  # the lock is held from here to the end of the batch
    try:
        todo = _plan(args, task_list, results, err)
        if files is None and any(FILES_PLACEHOLDER in (task.cwd or "") for task in todo):
            raise UsageError(f"a task cwd uses {FILES_PLACEHOLDER}: pass --files DIR")
        check_branch_count(settings, len(todo))
        if base is not None:  # with --ray, task cwds are paths on the nodes
            cwds = [(task, task_cwd(task, base, files)) for task in todo]
            check_task_cwds(cwds, task_list.line_of, args.tasks)
            check_isolation(composition, provider, (cwd for _, cwd in cwds))
        bad = len(task_list.bad_lines)
        if not todo:  # nothing to run: connect to nothing, start nothing
            return _report(Summary(0, 0, False, 0), bad, args.out, results, err)
        if args.ray is not None:
            from dsh_batch.ray_pool import check_ray, run_on_ray

            check_ray(args.ray or None)
            interrupts = Interrupts()
            with BatchDisplay(len(todo), err) as display, _signals_to(interrupts):
                summary = run_on_ray(
                    args.ray or None,
                    profile=Path(args.profile),
                    files=files,
                    plan=BatchPlan(todo, provider, budget, args.concurrency or 0),
                    base_cwd=args.cwd,
                    retries=args.ray_retries,
                    results=results,
                    observer=display.event,
                    interrupts=interrupts,
                    worktree=worktree,
                    confinement=args.confinement,
                    warm=args.warm,
                )
        else:
            assert base is not None
            plan = BatchPlan(todo, provider, budget, args.concurrency or default_concurrency())
            summary = anyio.run(_run_here, composition, plan, base, files, results, err)
        return _report(summary, bad, args.out, results, err)
    finally:
        results.close()


def _plan(
    args: argparse.Namespace, task_list: TaskList, results: ResultsFile, err: TextIO
) -> tuple[BatchTask, ...]:
    """The tasks to run (the engine's choice), after reporting what is skipped."""
    for line_no in results.unreadable:
        print(f"dsh: {args.out} line {line_no}: not a result record; ignored", file=err)
    for line in task_list.bad_lines:
        print(f"dsh: {args.tasks} line {line.line_no}: {line.reason}; skipped", file=err)
    total = len(task_list.tasks)
    recorded = results.done
    todo = select_tasks(task_list.tasks, results, retry_failed=args.retry_failed)
    if args.retry_failed:
        again = sum(1 for task in todo if task.id in recorded)
        if total - len(todo) or again:
            note = f" ({again} again after a failed record)" if again else ""
            print(
                f"dsh: {total - len(todo)} of {total} tasks already completed in {args.out}; "
                f"running {len(todo)}{note}",
                file=err,
            )
        return todo
    skipped = total - len(todo)
    if skipped:
        failed = sum(1 for task in task_list.tasks if task.id in recorded - results.completed)
        note = f" ({failed} of them failed; --retry-failed runs those again)" if failed else ""
        print(
            f"dsh: {skipped} of {total} tasks already in {args.out}{note}; running {len(todo)}",
            file=err,
        )
    return todo


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
        return EXIT_FAILED
    if summary.interrupted:
        print("dsh: batch interrupted; run the same command again to resume", file=err)
        return EXIT_INTERRUPTED
    return EXIT_OK if summary.failed == 0 and bad == 0 else EXIT_FAILED


@contextmanager
def _signals_to(interrupts: Interrupts) -> Iterator[None]:
    """SIGINT and SIGTERM become requests in ``interrupts`` while the Ray pool runs."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        interrupts.request(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _watch_signals(controller: CancelController, display: BatchDisplay, err: TextIO) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if controller.signal.aborted:
                print("dsh: still cancelling; waiting for every product to exit", file=err)
                continue
            name = signal.Signals(signum).name
            display.message(
                f"dsh: {name}: cancelling {display.running} running task(s); "
                "waiting for every product to exit"
            )
            controller.cancel(f"interrupted ({name})")


async def _run_here(
    composition: Composition,
    plan: BatchPlan,
    base: str,
    files: str | None,
    results: ResultsFile,
    err: TextIO,
) -> Summary:
    """The local runner under a display, with SIGINT and SIGTERM cancelling the batch."""
    controller = CancelController()
    with BatchDisplay(len(plan.tasks), err) as display:
        async with anyio.create_task_group() as outer:
            outer.start_soon(_watch_signals, controller, display, err)
            try:
                summary = await run_local(
                    composition, plan, base, files, results, controller.signal, display.event
                )
            finally:
                outer.cancel_scope.cancel()
    return summary
