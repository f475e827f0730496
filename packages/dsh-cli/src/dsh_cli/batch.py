"""``dsh batch``: many delegations from a task file, on this machine or on a Ray cluster.

``dsh batch PROFILE TARGET tasks.jsonl --out results.jsonl`` runs every task of the file
(see :mod:`dsh_cli.batch_io`) on one provider instance, at most ``--concurrency`` at a
time, and appends one record per task to the results file as each settles. The latest
record per id counts: ids already in the results file are skipped, so running the same
command again resumes an interrupted batch, and ``--retry-failed`` also runs the ids
whose latest record is not ``completed``. Everything that can be checked before the
first task is checked first (:mod:`dsh_cli.batch_checks`), and the results file is held
under an exclusive lock for the whole batch. Ctrl-C (or SIGTERM) cancels every run and
exits 130 once every product's process tree is gone; runs cancelled that way are not
recorded (they run again on resume). ``--ray [ADDRESS]`` runs the same batch on Ray
(:mod:`dsh_cli.batch_ray`).

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
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TextIO

import anyio
from dsh_profiles.confinement import announce_confinement
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import ProfileError, UsageError
from dsh_profiles.isolation import (
    check_branch_count,
    check_isolation,
    isolate_from_flags,
    worktree_from_flags,
)
from dsh_profiles.loader import Composition, compose
from dsh_profiles.options import budget_from, resolve_target
from dsh_profiles.profile import parse_profile, read_profile
from dsh_profiles.runtime import open_runtime
from dsh_profiles.warm import Warm, batch_warm
from dsh_subagent import (
    ABORTED,
    ERROR,
    Budget,
    CancelController,
    CancelSignal,
    Changes,
    ParentContext,
    SubagentError,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    Usage,
)
from dsh_worktree import for_task
from pydantic import JsonValue

from dsh_cli.batch_checks import check_base, check_out_path, check_task_cwds
from dsh_cli.batch_io import BatchRecord, BatchTask, ResultsFile, TaskList, read_tasks
from dsh_cli.batch_schema import (
    typed_row_schema,
    with_output_schema,
    with_schema,
)

__all__ = [
    "FILES_PLACEHOLDER",
    "BatchPlan",
    "FirstStartAlone",
    "StartGate",
    "cmd_batch",
    "default_concurrency",
    "load_batch_profile",
    "run_task",
    "task_cwd",
]

FILES_PLACEHOLDER: Final = "${DSH_FILES}"
"""Stands for the batch's files directory in profile strings and task ``cwd`` values."""

BATCH_SESSION: Final = "dsh-batch"
"""The parent session id every run of a batch carries."""

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


def default_concurrency() -> int:
    """The CPU count this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _substitute(value: Any, files: str) -> Any:
    if isinstance(value, str):
        return value.replace(FILES_PLACEHOLDER, files)
    if isinstance(value, Mapping):
        return {key: _substitute(item, files) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_substitute(item, files) for item in value]
    return value


def _mentions(value: Any) -> bool:
    if isinstance(value, str):
        return FILES_PLACEHOLDER in value
    if isinstance(value, Mapping):
        return any(_mentions(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_mentions(item) for item in value)
    return False


def load_batch_profile(
    path: str | Path,
    files: str | None,
    *,
    discovery: ProviderDiscovery | None = None,
    confinement: str | None = None,
    warm: Warm | None = None,
) -> Composition:
    """Read and compose a profile, replacing ``${DSH_FILES}`` in every string with ``files``
    (``confinement``: the ``--confinement`` override; ``warm``: ready products, see
    :func:`~dsh_cli.compose`).

    Raises:
        ProfileError: the profile is invalid, or it uses ``${DSH_FILES}`` without ``files``.
    """
    source = str(path)
    raw = read_profile(path).model_dump()
    if files is None:
        if _mentions(raw):
            raise ProfileError(source, [f"the profile uses {FILES_PLACEHOLDER}: pass --files DIR"])
        return compose(
            parse_profile(raw, source),
            source=source,
            discovery=discovery,
            confinement=confinement,
            warm=warm,
        )
    return compose(
        parse_profile(_substitute(raw, files), source),
        source=source,
        discovery=discovery,
        confinement=confinement,
        warm=warm,
    )


def task_cwd(task: BatchTask, base: str, files: str | None) -> str:
    """The task's workspace: its ``cwd`` (default ``.``) resolved against ``base``.

    ``${DSH_FILES}`` in it stands for ``files``. Lexical only: the provider probes the
    directory when the run starts, and a missing one fails that task alone.
    """
    raw = task.cwd or "."
    if files is not None:
        raw = raw.replace(FILES_PLACEHOLDER, files)
    return os.path.normpath(os.path.join(base, raw))


class StartGate(Protocol):
    """Orders product starts: ``async with gate.passage(): await service.start(...)``."""

    def passage(self) -> AbstractAsyncContextManager[None]:
        """Held around one product start."""
        ...


class FirstStartAlone:
    """The batch's first product start runs alone; once one start succeeded, none waits.

    Deliberate: a product that initialises state in its home on first use can fail when
    several copies do that at once (two Codex app-servers initialising one fresh
    ``CODEX_HOME`` race on its sqlite state and one exits during ``initialize``). Only
    the start is serialised, and only until the first one succeeded.
    """

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._warm = False

    @asynccontextmanager
    async def _passage(self) -> AsyncIterator[None]:
        if self._warm:
            yield
            return
        async with self._lock:
            yield
            self._warm = True  # not reached when the start failed: the next one goes alone

    def passage(self) -> AbstractAsyncContextManager[None]:
        """Held around one product start."""
        return self._passage()


def _safe_message(exc: BaseException) -> str:
    """A failure as one safe line: a SubagentError's message, else only the type name."""
    if isinstance(exc, SubagentError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_safe_message(inner) for inner in exc.exceptions)
    return f"internal error ({type(exc).__name__})"


async def run_task(
    service: SubagentService,
    provider: str,
    task: BatchTask,
    cwd: str,
    cancel: CancelSignal,
    budget: Budget | None = None,
    gate: StartGate | None = None,
) -> BatchRecord | None:
    """Delegate one task, dispose the run and return its record.

    ``gate`` (if given) is held around the product start (see :class:`FirstStartAlone`).

    ``None`` when ``cancel`` fired (the batch was interrupted) and the run was cancelled
    by it: such a task is not recorded, so a resumed batch runs it again. A start that
    fails for another reason is an ``error`` record whose diagnostic says why. The record
    is returned only after the run's whole process tree has exited.
    """
    started = time.monotonic()

    def record(
        stop_reason: str,
        answer: str = "",
        diagnostic: str | None = None,
        usage: Usage | None = None,
        changes: Changes | None = None,
        structured: JsonValue = None,
    ) -> BatchRecord:
        return BatchRecord(
            id=task.id,
            stop_reason=stop_reason,
            answer=answer,
            diagnostic=diagnostic,
            usage=usage,
            changes=changes,
            elapsed_seconds=round(time.monotonic() - started, 3),
            structured=structured,
        )

    request = SubagentStartRequest(
        prompt=(TextBlock(text=task.task),),
        parent=ParentContext(session_id=BATCH_SESSION, cwd=cwd),
        cancel=cancel,
        label=f"dsh batch {task.id}",
        budget=budget,
        output_schema=task.output_schema,
    )
    try:
        # An isolated run names the task on its commit and in its branch (dsh-worktree).
        with for_task(task.id):
            if gate is None:
                run = await service.start(provider, request)
            else:
                async with gate.passage():
                    run = await service.start(provider, request)
    except SubagentError as exc:
        return (
            None if cancel.aborted else record(ERROR, diagnostic=f"could not start: {exc.message}")
        )
    result: SubagentResult | None = None
    failure = "internal error (no result)"
    try:
        result = await run.result()
    except Exception as exc:
        failure = _safe_message(exc)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await run.dispose()
            except Exception as exc:
                result, failure = None, f"teardown failed: {_safe_message(exc)}"
    if result is None:
        return record(ERROR, diagnostic=failure)
    if cancel.aborted and result.stop_reason == ABORTED:
        return None
    return record(
        result.stop_reason,
        result.text,
        result.diagnostic,
        result.usage,
        result.changes,
        result.structured,
    )


@dataclass(frozen=True)
class BatchPlan:
    """What a batch will run: the tasks not yet in the results file, in file order."""

    tasks: tuple[BatchTask, ...]
    provider: str
    budget: Budget | None
    concurrency: int


def cmd_batch(
    args: argparse.Namespace, out: TextIO, err: TextIO, discovery: ProviderDiscovery | None
) -> int:
    """Run ``dsh batch``; returns the exit status (usage problems raise ``DshCliError``).

    Everything that can be checked before the first task is (:mod:`dsh_cli.batch_checks`),
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
            from dsh_cli.batch_ray import check_ray, run_on_ray

            check_ray(args.ray or None)
            summary = run_on_ray(
                args.ray or None,
                profile=Path(args.profile),
                files=files,
                plan=BatchPlan(todo, provider, budget, args.concurrency or 0),
                base_cwd=args.cwd,
                retries=args.ray_retries,
                results=results,
                err=err,
                worktree=worktree,
                confinement=args.confinement,
                warm=args.warm,
            )
        else:
            assert base is not None
            plan = BatchPlan(todo, provider, budget, args.concurrency or default_concurrency())
            summary = anyio.run(_run_local, composition, plan, base, files, results, err)
        return _report(summary, bad, args.out, results, err)
    finally:
        results.close()


def _plan(
    args: argparse.Namespace, task_list: TaskList, results: ResultsFile, err: TextIO
) -> tuple[BatchTask, ...]:
    """The tasks to run (the latest record per id counts), after reporting what is skipped."""
    for line_no in results.unreadable:
        print(f"dsh: {args.out} line {line_no}: not a result record; ignored", file=err)
    for line in task_list.bad_lines:
        print(f"dsh: {args.tasks} line {line.line_no}: {line.reason}; skipped", file=err)
    total = len(task_list.tasks)
    completed = results.completed
    recorded = results.done
    if args.retry_failed:
        todo = tuple(task for task in task_list.tasks if task.id not in completed)
        again = sum(1 for task in todo if task.id in recorded)
        if total - len(todo) or again:
            note = f" ({again} again after a failed record)" if again else ""
            print(
                f"dsh: {total - len(todo)} of {total} tasks already completed in {args.out}; "
                f"running {len(todo)}{note}",
                file=err,
            )
        return todo
    todo = tuple(task for task in task_list.tasks if task.id not in recorded)
    skipped = total - len(todo)
    if skipped:
        failed = sum(1 for task in task_list.tasks if task.id in recorded - completed)
        note = f" ({failed} of them failed; --retry-failed runs those again)" if failed else ""
        print(
            f"dsh: {skipped} of {total} tasks already in {args.out}{note}; running {len(todo)}",
            file=err,
        )
    return todo


@dataclass(frozen=True)
class Summary:
    """How a batch ended."""

    done: int
    failed: int
    interrupted: bool
    not_run: int
    error: str | None = None


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


async def _watch_signals(
    controller: CancelController, on_first: Sequence[Any], err: TextIO
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if controller.signal.aborted:
                print("dsh: still cancelling; waiting for every product to exit", file=err)
                continue
            name = signal.Signals(signum).name
            for announce in on_first:
                announce(name)
            controller.cancel(f"interrupted ({name})")


async def _run_local(
    composition: Composition,
    plan: BatchPlan,
    base: str,
    files: str | None,
    results: ResultsFile,
    err: TextIO,
) -> Summary:
    from dsh_cli.batch_progress import BatchDisplay

    controller = CancelController()
    cancel = controller.signal
    failure: str | None = None
    with BatchDisplay(len(plan.tasks), err) as display:

        def announce(name: str) -> None:
            display.message(
                f"dsh: {name}: cancelling {display.running} running task(s); "
                "waiting for every product to exit"
            )

        gate = FirstStartAlone()

        async def one(service: SubagentService, task: BatchTask, slots: anyio.Semaphore) -> None:
            try:
                cwd = task_cwd(task, base, files)
                record = await run_task(
                    service, plan.provider, task, cwd, cancel, plan.budget, gate
                )
            finally:
                slots.release()
            if record is None:
                display.left()
            else:
                results.append(record)
                display.settled_one(record)

        async def drive() -> None:
            slots = anyio.Semaphore(plan.concurrency)
            async with open_runtime(composition) as runtime, anyio.create_task_group() as tg:
                runtime.service.keep_ready(plan.provider, base)  # the tasks' default cwd
                for task in plan.tasks:
                    await slots.acquire()
                    if cancel.aborted:
                        slots.release()
                        break
                    display.started()
                    tg.start_soon(one, runtime.service, task, slots)

        async with anyio.create_task_group() as outer:
            outer.start_soon(_watch_signals, controller, [announce], err)
            try:
                await drive()
            except Exception as exc:
                failure = _safe_message(exc)
            finally:
                outer.cancel_scope.cancel()
        return Summary(
            done=display.done,
            failed=display.failed,
            interrupted=cancel.aborted,
            not_run=len(plan.tasks) - display.settled,
            error=failure,
        )
