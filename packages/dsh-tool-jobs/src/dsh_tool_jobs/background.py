"""One-shot background subagents: a subagent run as a ``subagent-N`` Job.

Foreground and background differ only in who waits for the same run. In background
the tool call registers a Job synchronously and returns its id at once; the run's
startup, execution, result mapping and disposal all happen in the Job's ``done``,
awaited in the registry's task group. The run's progress feeds the Job's activity (safe
categories only, see :mod:`dsh_tool_jobs.activity`), which ``job_list`` shows.

Cancellation ownership: the run gets a fresh :class:`~dsh_subagent.CancelController`
owned by the Job, not the tool call's signal, because the tool call ends as soon as the
id is returned. ``job_kill``, owner disposal and registry exit cancel it; before
publication that rolls the product start back, afterwards the run settles ``aborted``.

Settlement (``quiescence:after-cancel-any-phase``) always awaits ``run.result()`` *and*
``run.dispose()`` before reporting, so a settled Job means no product process is left.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final

import anyio
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    CancelSignal,
    ParentContext,
    ProductStartError,
    SubagentRun,
    SubagentStartRequest,
    UsageUpdated,
    render_changes,
)
from dsh_subagent.service import PublishedRun, SubagentService

from dsh_tool_jobs._describe import describe_error
from dsh_tool_jobs.activity import ActivityTracker
from dsh_tool_jobs.model import JobHooks, JobOutcome, JobStart
from dsh_tool_jobs.registry import JobRegistry

__all__ = [
    "BACKGROUND_KILL_REASON",
    "SUBAGENT_JOB_KIND",
    "BackgroundSubagentLauncher",
    "settle_run",
    "settle_start",
]

SUBAGENT_JOB_KIND: Final = "subagent"
BACKGROUND_KILL_REASON: Final = "background subagent task killed"
"""The cancel reason when ``job_kill`` gives none."""


async def settle_run(run: SubagentRun) -> JobOutcome:
    """Map one published run to a Job outcome, disposing it first. Never raises.

    ``completed`` carries the final text; ``aborted`` is ``killed``; any other stop
    reason is ``failed`` with ``<reason>`` or ``<reason>; diagnostic: <diagnostic>``
    (partial output is dropped). A raising ``result()`` fails with the error; a raising
    ``dispose()`` fails too, appending ``dispose failed: <error>`` to any earlier detail
    (a completed run then loses its output).
    """
    try:
        result = await run.result()
    except Exception as exc:
        outcome = JobOutcome(status="failed", detail=describe_error(exc))
    else:
        if result.stop_reason == COMPLETED:
            text = result.text
            if result.changes is not None:  # an isolated run: where its changes went
                text += f"\n{render_changes(result.changes)}"
            outcome = JobOutcome(status="completed", output=text)
        elif result.stop_reason == ABORTED:
            outcome = JobOutcome(status="killed")
        elif result.diagnostic is not None:
            outcome = JobOutcome(
                status="failed", detail=f"{result.stop_reason}; diagnostic: {result.diagnostic}"
            )
        else:
            outcome = JobOutcome(status="failed", detail=result.stop_reason)
    finally:
        # Disposal runs on every path, even if this task is being cancelled.
        with anyio.CancelScope(shield=True):
            try:
                await run.dispose()
            except Exception as exc:
                dispose_error: Exception | None = exc
            else:
                dispose_error = None
    if dispose_error is not None:
        failure = f"dispose failed: {describe_error(dispose_error)}"
        detail = f"{outcome.detail}; {failure}" if outcome.detail else failure
        outcome = JobOutcome(status="failed", detail=detail)
    return outcome


def _rollback_failed(exc: BaseException) -> bool:
    # Cancellation must not hide a failed cleanup: an aggregate or a start error whose
    # rollback also failed stays "failed" even after a kill.
    if isinstance(exc, BaseExceptionGroup):
        return True
    return isinstance(exc, ProductStartError) and exc.rollback_failed


async def settle_start(start: Awaitable[SubagentRun], signal: CancelSignal) -> JobOutcome:
    """Await a run's startup, then :func:`settle_run`. Never raises.

    A startup that raises after ``signal`` aborted is ``killed`` unless its rollback
    failed (``ProductStartError.rollback_failed`` or an exception group); any other
    startup failure is ``failed`` with the error.
    """
    try:
        run = await start
    except Exception as exc:
        if signal.aborted and not _rollback_failed(exc):
            return JobOutcome(status="killed")
        return JobOutcome(status="failed", detail=describe_error(exc))
    return await settle_run(run)


async def _tracked(start: Awaitable[PublishedRun], tracker: ActivityTracker) -> PublishedRun:
    """The started run, its progress observed by ``tracker`` from publication on."""
    run = await start
    progress = run.progress
    if progress.usage is not None:  # what was reported before the listener was added
        tracker.observe(UsageUpdated(usage=progress.usage))
    if progress.last is not None and not isinstance(progress.last, UsageUpdated):
        tracker.observe(progress.last)
    progress.add_listener(tracker.observe)
    return run


class BackgroundSubagentLauncher:
    """Starts subagent runs as background Jobs of a :class:`JobRegistry`.

    Args:
        registry: The running Job registry.
        service: The running subagent service the runs start on.
    """

    def __init__(self, registry: JobRegistry, service: SubagentService) -> None:
        self._registry = registry
        self._service = service

    def launch(
        self,
        *,
        provider: str,
        request: SubagentStartRequest,
        label: str,
        parent: ParentContext,
    ) -> str:
        """Register a ``subagent-N`` job for one run and return its id at once.

        Registry preflight (label, admission, registry running) happens synchronously;
        if it raises, the provider is never started. The run itself starts in the Job,
        under a Job-owned cancel signal that replaces ``request.cancel``.

        Raises:
            JobError: The registry refused the job.
        """
        registry, service = self._registry, self._service

        def run() -> JobHooks:
            controller = CancelController()
            owned = request.model_copy(update={"cancel": controller.signal})
            tracker = ActivityTracker()

            def cancel(reason: str | None) -> None:
                controller.cancel(reason or BACKGROUND_KILL_REASON)

            return JobHooks(
                cancel=cancel,
                done=settle_start(
                    _tracked(service.start(provider, owned), tracker), controller.signal
                ),
                activity=tracker.snapshot,
            )

        return registry.start(JobStart(kind=SUBAGENT_JOB_KIND, label=label, owner=parent, run=run))
