"""The local runner: a batch's tasks on this machine, at most ``concurrency`` at a time.

Every task runs on one open runtime of the composed profile; each record is handed to
the sink as its task settles, and progress goes out as events
(:mod:`dsh_batch.events`). Cancelling ``cancel`` stops new starts and cancels every run
in progress; runs cancelled that way are not recorded (they run again on resume), and
the runner returns only once every product's process tree is gone. The runner installs
no signal handler: the caller decides what interrupts a batch (``dsh batch`` turns
SIGINT and SIGTERM into a cancel).
"""

from __future__ import annotations

import anyio
from dsh_profiles.loader import Composition
from dsh_profiles.runtime import open_runtime
from dsh_subagent import CancelSignal, SubagentService

from dsh_batch.engine import (
    BatchPlan,
    FirstStartAlone,
    RecordSink,
    Summary,
    run_task,
    safe_message,
    task_cwd,
)
from dsh_batch.events import BatchCounts, BatchObserver, TaskLeft, TaskSettled, TaskStarted
from dsh_batch.files import BatchTask

__all__ = ["run_local"]


async def run_local(
    composition: Composition,
    plan: BatchPlan,
    base: str,
    files: str | None,
    results: RecordSink,
    cancel: CancelSignal,
    observer: BatchObserver | None = None,
) -> Summary:
    """Run ``plan`` here (see the module doc); a failure outside a task is the summary's
    ``error``, never raised.

    Args:
        composition: The composed profile (``plan.provider`` is one of its instances).
        plan: The tasks, the instance, the per-task budget and the concurrency (≥ 1).
        base: The absolute base directory of relative task cwds.
        files: The directory ``${DSH_FILES}`` names, or ``None``.
        results: Receives each record as its task settles.
        cancel: Stops the batch (see the module doc).
        observer: Called with each progress event.
    """
    counts = BatchCounts(len(plan.tasks), observer)
    gate = FirstStartAlone()
    failure: str | None = None

    async def one(service: SubagentService, task: BatchTask, slots: anyio.Semaphore) -> None:
        try:
            cwd = task_cwd(task, base, files)
            record = await run_task(service, plan.provider, task, cwd, cancel, plan.budget, gate)
        finally:
            slots.release()
        if record is None:
            counts.emit(TaskLeft(task.id))
        else:
            results.append(record)
            counts.emit(TaskSettled(record))

    try:
        slots = anyio.Semaphore(max(1, plan.concurrency))
        async with open_runtime(composition) as runtime, anyio.create_task_group() as tg:
            runtime.service.keep_ready(plan.provider, base)  # the tasks' default cwd
            for task in plan.tasks:
                await slots.acquire()
                if cancel.aborted:
                    slots.release()
                    break
                counts.emit(TaskStarted(task.id))
                tg.start_soon(one, runtime.service, task, slots)
    except Exception as exc:
        failure = safe_message(exc)
    return Summary(
        done=counts.done,
        failed=counts.failed,
        interrupted=cancel.aborted,
        not_run=len(plan.tasks) - counts.settled,
        error=failure,
    )
