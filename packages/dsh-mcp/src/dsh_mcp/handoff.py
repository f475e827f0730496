"""A foreground delegation still running after ``[mcp] foreground_seconds`` becomes a Job.

MCP clients give up on a tool call after 60-120 s (Claude Desktop, Claude Code, Cursor),
and a delegation often takes longer. So the server answers a foreground delegation that
has not settled after ``foreground_seconds`` with the id of a background job that *is*
that same call: nothing is restarted and nothing is lost. The run goes on under the
call's own cancel controller; its end is the job's outcome, which ``job_output`` (with
``wait: true``) collects and a completion notice announces; ``job_kill``, the session's
end and the server's stop cancel it like any background job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    CancelSignal,
    ParentContext,
    PublishedRun,
    SubagentResult,
    UsageUpdated,
)
from dsh_subagent.tool import ToolResult
from dsh_tool_jobs import JobRegistry
from dsh_tool_jobs.activity import ActivityTracker
from dsh_tool_jobs.background import BACKGROUND_KILL_REASON, SUBAGENT_JOB_KIND
from dsh_tool_jobs.model import JobHooks, JobOutcome, JobStart

__all__ = ["CallState", "hand_off", "handoff_text", "job_outcome", "label_of", "track"]


def _error(message: str) -> ToolResult:
    return ToolResult(f"Error: {message}", is_error=True)


@dataclass(eq=False)
class CallState:
    """One tool call the server runs: what it returned, and whether it became a Job."""

    done: anyio.Event = field(default_factory=anyio.Event)
    result: ToolResult = field(default_factory=lambda: _error("the call did not finish"))
    settled: SubagentResult | None = None
    job_id: str | None = None
    """The background Job the call started (``run_in_background: true``)."""
    run: PublishedRun | None = None
    handoff: ToolResult | None = None
    """What the client got when the call became a Job (``None``: it did not)."""
    tracker: ActivityTracker | None = None
    progress: list[anyio.CancelScope] = field(default_factory=list)
    """The scopes forwarding the call's progress; cancelled when it becomes a Job."""

    def published(self, run: PublishedRun) -> None:
        """The call's run was published."""
        self.run = run
        if self.tracker is not None:
            track(run, self.tracker)


def track(run: PublishedRun, tracker: ActivityTracker) -> None:
    """Feed the run's progress (what was reported so far, then every event) to ``tracker``."""
    progress = run.progress
    if progress.usage is not None:
        tracker.observe(UsageUpdated(usage=progress.usage))
    if progress.last is not None and not isinstance(progress.last, UsageUpdated):
        tracker.observe(progress.last)
    progress.add_listener(tracker.observe)


def job_outcome(
    result: ToolResult, settled: SubagentResult | None, *, cancelled: bool
) -> JobOutcome:
    """The Job outcome of a call that ended: the same mapping as a background run's.

    ``completed`` carries the final text; ``aborted`` is ``killed``; any other stop
    reason is ``failed`` with ``<reason>`` or ``<reason>; diagnostic: <diagnostic>``. A
    call that ended without a run is ``killed`` when it was cancelled (its start was
    rolled back), else ``failed`` with its error.
    """
    if settled is None:
        if cancelled and result.is_error:
            return JobOutcome(status="killed")
        if result.is_error:
            return JobOutcome(status="failed", detail=result.text.removeprefix("Error: "))
        return JobOutcome(status="completed", output=result.text)
    if settled.stop_reason == COMPLETED:
        return JobOutcome(status="completed", output=settled.text)
    if settled.stop_reason == ABORTED:
        return JobOutcome(status="killed")
    if settled.diagnostic is not None:
        return JobOutcome(
            status="failed", detail=f"{settled.stop_reason}; diagnostic: {settled.diagnostic}"
        )
    return JobOutcome(status="failed", detail=settled.stop_reason)


async def _when_done(state: CallState, signal: CancelSignal) -> JobOutcome:
    await state.done.wait()
    return job_outcome(state.result, state.settled, cancelled=signal.aborted)


def handoff_text(tool: str, seconds: float, job_id: str) -> str:
    """What the client (and its model) is told when a call became a Job."""
    return (
        f"{tool} is still running after {seconds:g} s; it continues as background job "
        f"{job_id} (not restarted). Call job_output with job_id {job_id!r} and wait: true "
        "to get its result; job_kill stops it."
    )


def hand_off(
    registry: JobRegistry,
    state: CallState,
    *,
    label: str,
    owner: ParentContext,
    controller: CancelController,
) -> str:
    """Register the running call as a ``subagent-N`` Job of ``owner``; returns its id.

    Args:
        registry: The running Job registry.
        state: The call.
        label: The Job's label (the call's ``description``).
        owner: The caller's parent context (the Job is visible to it).
        controller: The call's cancel controller (``job_kill`` and owner disposal use
            it).

    Raises:
        JobError: the registry refused the Job (e.g. the owner's job limit); the call
            then simply goes on in the foreground.
    """
    tracker = ActivityTracker()

    def run() -> JobHooks:
        return JobHooks(
            cancel=lambda reason: controller.cancel(reason or BACKGROUND_KILL_REASON),
            done=_when_done(state, controller.signal),
            activity=tracker.snapshot,
        )

    job_id = registry.start(JobStart(kind=SUBAGENT_JOB_KIND, label=label, owner=owner, run=run))
    state.tracker = tracker
    if state.run is not None:
        track(state.run, tracker)
    for scope in state.progress:
        scope.cancel()  # the call was answered: its progress token is spent
    return job_id


def label_of(arguments: Mapping[str, object], tool: str) -> str:
    """The Job label: the call's ``description``, else the tool's name."""
    description = arguments.get("description")
    return description if isinstance(description, str) and description.strip() else tool
