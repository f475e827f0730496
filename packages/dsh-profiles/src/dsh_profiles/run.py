"""One task through a composition, as ``dsh run`` runs it: :func:`run_task`.

:func:`run_task` checks everything it can before anything starts (the task, the target,
the confinement, the isolation of the cwd, a continuation handle; a problem is one
:class:`~dsh_profiles.errors.UsageError` naming it), then opens the runtime, runs the task
in the foreground (or as a background Job through the target's tool) and returns a
:class:`RunOutcome` once the product's whole process tree is gone. A run that could not
start, or failed outside its result, is an outcome too (:class:`RunFailure`, one safe
line), never an exception. Progress reaches ``on_event`` as it happens.

Exit status of an outcome (:attr:`RunOutcome.exit_code`, what ``dsh run`` exits with):

====  ==================================================
0     ``completed``
1     ``error`` (a run budget that ran out included) or any unknown stop reason; the
      run could not start or failed outside its result
3     ``max-tokens``
4     ``refusal``
130   ``aborted`` (cancelled), or cancelled before the product started
====  ==================================================
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

import anyio
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_TOKENS,
    REFUSAL,
    Budget,
    CancelController,
    CancelSignal,
    ContinuationHandle,
    ParentContext,
    ProgressEvent,
    SubagentError,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
    confinement_fallback_line,
    confinement_refusal_line,
)
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_tool_jobs import JobSnapshot
from dsh_worktree import Worktree, WorktreeError
from pydantic import JsonValue

from dsh_profiles.confinement import confinement_modes
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import isolate, preflight_isolation
from dsh_profiles.loader import Composition
from dsh_profiles.options import resolve_target, typed_row_schema
from dsh_profiles.output_schema import check_schema
from dsh_profiles.runtime import Runtime, open_runtime, validate_task, validate_utf8
from dsh_profiles.signals import cancellation

__all__ = [
    "EXIT_CODES",
    "EXIT_START_FAILED",
    "RunEvent",
    "RunFailure",
    "RunNotice",
    "RunObserver",
    "RunOutcome",
    "RunPublished",
    "RunSettled",
    "RunStarting",
    "exit_code_for",
    "json_record",
    "one_line",
    "parse_resume",
    "run_task",
]

EXIT_CODES: Final = {COMPLETED: 0, ERROR: 1, MAX_TOKENS: 3, REFUSAL: 4, ABORTED: 130}
"""The exit status of each known stop reason."""

EXIT_START_FAILED: Final = 1
"""The exit status of a run that could not start, or failed outside its result."""

_WAIT_MS: Final = 600_000.0


def exit_code_for(stop_reason: str) -> int:
    """The process exit status for a stop reason (unknown reasons are failures)."""
    return EXIT_CODES.get(stop_reason, 1)


def one_line(exc: BaseException) -> str:
    """A failure as one safe line: a SubagentError's message, else only the type name."""
    if isinstance(exc, SubagentError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(one_line(inner) for inner in exc.exceptions)
    return f"internal error ({type(exc).__name__})"


@dataclass(frozen=True)
class RunNotice:
    """A line worth showing the user (a confinement fallback, a signal being honoured,
    a background Job started); already phrased, never product text."""

    text: str


@dataclass(frozen=True)
class RunStarting:
    """The runtime is open and the product is being started: the run's clock starts."""


@dataclass(frozen=True)
class RunPublished:
    """The run was published: the product is working on the task."""


@dataclass(frozen=True)
class RunSettled:
    """The foreground run ended: its stop reason, or ``could not start``."""

    outcome: str


RunEvent = RunNotice | RunStarting | RunPublished | RunSettled | ProgressEvent
"""Everything ``on_event`` is called with (progress events are ``dsh_subagent``'s)."""

RunObserver = Callable[[RunEvent], None]
"""Called in the event loop with each event, in order; it must not block for long."""


@dataclass(frozen=True)
class RunFailure:
    """A run that could not start, or failed outside its result: one safe line.

    A value, not an exception: no ``ExceptionGroup`` (and no traceback with what a
    provider keeps off its message) reaches the caller.
    """

    stage: Literal["could not start", "failed"]
    message: str


@dataclass(frozen=True)
class RunOutcome:
    """How :func:`run_task` ended. At most one of ``result``, ``job`` and ``failure`` is
    set; none is when the run was cancelled before the product started.

    Attributes:
        target: The instance that ran (foreground), or the tool (background).
        result: The foreground run's result.
        job: The background Job's last snapshot (terminal).
        job_output: The background Job's output.
        failure: Why the run could not start, or failed outside its result.
        elapsed: Seconds from the product's start to the settled result (foreground).
        typed: Whether an output schema applied (the result's ``structured`` counts).
    """

    target: str
    result: SubagentResult | None = None
    job: JobSnapshot | None = None
    job_output: str = ""
    failure: RunFailure | None = None
    elapsed: float = 0.0
    typed: bool = False

    @property
    def cancelled_before_start(self) -> bool:
        """Cancelled before the product started: nothing ran."""
        return self.result is None and self.job is None and self.failure is None

    @property
    def exit_code(self) -> int:
        """The exit status ``dsh run`` ends with (see the module's table)."""
        if self.failure is not None:
            return EXIT_START_FAILED
        if self.result is not None:
            return exit_code_for(self.result.stop_reason)
        if self.job is None or self.job.status == "killed":
            return EXIT_CODES[ABORTED]
        if self.job.status == "completed":
            return 0
        # A failed subagent Job's detail starts with the run's stop reason.
        return exit_code_for((self.job.detail or "").split(";", 1)[0].strip())


def json_record(
    result: SubagentResult, elapsed: float, *, typed: bool = False
) -> dict[str, JsonValue]:
    """The ``dsh run --json`` record of a settled run.

    ``answer`` is the final text, or the partial output of a run that did not complete;
    ``usage`` is what the product reported (``null`` fields: not reported), or ``null``;
    ``changes`` is where an isolated run's changes went (branch, commit, base,
    files_changed, insertions, deletions, worktree), or ``null`` without isolation.
    ``continuation`` is the handle a follow-up takes (``--resume``), or ``null``. With
    ``typed`` (an output schema applied) ``structured`` is the validated object, or
    ``null`` when the answer did not match.
    """
    usage = None if result.usage is None else result.usage.model_dump(mode="json")
    changes = None if result.changes is None else result.changes.model_dump(mode="json")
    continuation = None if result.continuation is None else result.continuation.dumps()
    record: dict[str, JsonValue] = {
        "answer": result.text,
        "stop_reason": result.stop_reason,
        "diagnostic": result.diagnostic,
        "usage": usage,
        "changes": changes,
        "elapsed_seconds": round(elapsed, 3),
        "continuation": continuation,
    }
    if typed:
        record["structured"] = result.structured
    return record


def parse_resume(token: str | None, what: str = "resume") -> ContinuationHandle | None:
    """The continuation handle in ``token`` (``dshc1.…``), or ``None`` without one.

    Raises:
        UsageError: not a handle; the message starts with ``what``.
    """
    if token is None:
        return None
    try:
        return ContinuationHandle.loads(token)
    except SubagentError as exc:
        raise UsageError(f"{what}: {exc.message}") from None


@dataclass(frozen=True)
class _Plan:
    composition: Composition
    instance: str
    tool: str | None
    task: str
    request: SubagentStartRequest


def _check_length(task: str, instance: str, composition: Composition) -> None:
    """A task past the product's input limit is the caller's to shorten: refused before
    the start (the product's own check at start remains for a caller of the service)."""
    limit = getattr(composition.provider(instance).provider, "max_task_chars", None)
    if isinstance(limit, int) and len(task) > limit:
        raise UsageError(
            f"the task is {len(task):,} characters; {instance} accepts at most {limit:,} "
            "(its product's input limit): shorten it or pass the content as a file"
        )


def _enterable(path: str) -> bool:
    """``path`` is a directory this process may enter (what a product's cwd must be)."""
    return os.path.isdir(path) and os.access(path, os.X_OK)


async def _plan(
    composition: Composition,
    *,
    target: str,
    task: str,
    instance: bool,
    cwd: str,
    background: bool,
    budget: Budget | None,
    resume: ContinuationHandle | str | None,
    output_schema: dict[str, JsonValue] | None,
    worktree: Worktree | None,
    session_id: str,
    label: str,
    notify: Callable[[str], None],
) -> _Plan:
    """Every check before anything starts; the first problem is a :class:`UsageError`."""
    if background and (budget is not None or resume is not None or output_schema is not None):
        raise UsageError("budget, resume and output_schema apply to foreground runs only")
    validate_task(task)
    validate_utf8("the cwd", cwd)
    handle = parse_resume(resume) if isinstance(resume, str) else resume
    if output_schema is not None:
        output_schema = check_schema(output_schema, "output_schema")
    provider = resolve_target(composition, target, instance)
    _check_length(task, provider, composition)
    if output_schema is None:  # a typed tool row's own schema
        output_schema = typed_row_schema(composition, target, instance)
    modes = confinement_modes([composition.provider(provider).provider])
    refusal = confinement_refusal_line(modes)
    if refusal is not None:
        raise UsageError(refusal)
    fallback = confinement_fallback_line(modes)
    if fallback is not None:
        notify(fallback.removeprefix("dsh: "))  # notices are phrased without the prefix
    if worktree is not None:
        try:
            composition = isolate(composition, provider, worktree)
        except WorktreeError as exc:
            raise UsageError(exc.message) from None
    if not await anyio.to_thread.run_sync(_enterable, cwd):
        raise UsageError(f"cwd {cwd!r} is not an accessible directory")
    cwd = os.path.abspath(cwd)  # noqa: ASYNC240 - reads only the process's cwd, no I/O wait
    await preflight_isolation(composition, provider, [cwd])
    isolated = composition.provider(provider).worktree is not None
    if handle is not None and handle.workspace is not None and not isolated:
        on = f" on branch {handle.branch}" if handle.branch else ""
        raise UsageError(
            f"--resume: the handle continues an isolated run (its work is{on} in a "
            "worktree); add --worktree"
        )
    tool = None
    if background:
        row = next((t for t in composition.tools if t.name == target), None)
        if instance or row is None or row.background_mode != "one-shot":
            raise UsageError("--background needs a tool whose background_mode is 'one-shot'")
        tool = row.name
    request = SubagentStartRequest(
        prompt=(TextBlock(text=task),),
        parent=ParentContext(session_id=session_id, cwd=cwd),
        label=label,
        budget=budget,
        resume=handle,
        output_schema=output_schema,
    )
    return _Plan(composition, provider, tool, task, request)


async def run_task(
    composition: Composition,
    *,
    target: str,
    task: str,
    instance: bool = False,
    cwd: str = ".",
    background: bool = False,
    budget: Budget | None = None,
    resume: ContinuationHandle | str | None = None,
    output_schema: dict[str, JsonValue] | None = None,
    worktree: Worktree | None = None,
    cancel: CancelSignal | None = None,
    handle_signals: bool = False,
    on_event: RunObserver | None = None,
    session_id: str = "dsh-run",
    label: str = "dsh run",
) -> RunOutcome:
    """Run ``task`` on what ``target`` names, as ``dsh run`` does; the outcome once the
    product's whole process tree is gone.

    Args:
        composition: A loaded profile (:func:`~dsh_profiles.loader.load_profile`).
        target: A tool name of the profile, or an instance name.
        task: The complete, self-contained task text.
        instance: Treat ``target`` as an instance name only.
        cwd: The parent session's workspace (made absolute).
        background: Run as a background Job through the target's tool
            (``background_mode = "one-shot"``) and collect it; foreground-only options
            (``budget``, ``resume``, ``output_schema``) are refused with it.
        budget: The run's budget (it only tightens the instance's own).
        resume: A continuation handle (or its ``dshc1.…`` text) of an earlier run.
        output_schema: A JSON Schema (object root) the answer must match; default: the
            tool row's own ``output_schema``.
        worktree: Run in a git worktree of the cwd's repository with these settings, in
            place of the instance's own isolation (``dsh run`` lays its ``--worktree``
            flags over the profile's settings first; see docs/worktrees.md).
        cancel: Cancels the run: it settles ``aborted`` (a Job is killed).
        handle_signals: Also cancel on SIGINT and SIGTERM for the call's whole length
            (main thread only); off by default, so a host's own handlers stay in charge.
        on_event: Called with each :data:`RunEvent` as it happens.
        session_id: The parent session id the run carries.
        label: The run's label (its Job's description in the background).

    Raises:
        UsageError: a bad task, target, schema, handle, isolation or confinement; the
            message names it, and nothing was started.
    """

    def emit(event: RunEvent) -> None:
        if on_event is not None:
            on_event(event)

    def notify(text: str) -> None:
        emit(RunNotice(text))

    plan = await _plan(
        composition,
        target=target,
        task=task,
        instance=instance,
        cwd=cwd,
        background=background,
        budget=budget,
        resume=resume,
        output_schema=output_schema,
        worktree=worktree,
        session_id=session_id,
        label=label,
        notify=notify,
    )
    async with cancellation(
        cancel,
        handle_signals=handle_signals,
        notify=notify,
        first=lambda name: f"{name}: cancelling the run",
        again="still cancelling; waiting for the product to exit",
    ) as controller:
        if plan.tool is not None:
            body = functools.partial(_background, plan, plan.tool, controller, notify)
        else:
            body = functools.partial(_foreground, plan, controller, emit)
        return await _outcome(body, plan)


async def _outcome(body: Callable[[], Awaitable[RunOutcome]], plan: _Plan) -> RunOutcome:
    try:
        return await body()
    except Exception as exc:
        target = plan.tool if plan.tool is not None else plan.instance
        return RunOutcome(target, failure=RunFailure("failed", one_line(exc)))


async def _foreground(
    plan: _Plan, controller: CancelController, emit: Callable[[RunEvent], None]
) -> RunOutcome:
    request = plan.request.model_copy(update={"cancel": controller.signal})
    typed = request.output_schema is not None
    async with open_runtime(plan.composition) as runtime:
        emit(RunStarting())
        began = time.monotonic()
        try:
            run = await runtime.service.start(plan.instance, request)
        except SubagentError as exc:
            emit(RunSettled("could not start"))
            if controller.signal.aborted:
                return RunOutcome(plan.instance)
            return RunOutcome(plan.instance, failure=RunFailure("could not start", exc.message))
        emit(RunPublished())
        try:
            async with anyio.create_task_group() as group:

                async def follow() -> None:  # ends by itself once the run settled
                    async for event in run.progress:
                        emit(event)

                group.start_soon(follow)
                result = await run.result()
            elapsed = time.monotonic() - began
            emit(RunSettled(result.stop_reason))
            return RunOutcome(plan.instance, result=result, elapsed=elapsed, typed=typed)
        finally:
            await run.dispose()


async def _background(
    plan: _Plan, tool: str, controller: CancelController, notify: Callable[[str], None]
) -> RunOutcome:
    """Start through the subagent tool with ``run_in_background``, then collect the Job."""
    parent = plan.request.parent
    async with open_runtime(plan.composition) as runtime:
        started = await run_tool_call(
            runtime.tools[tool],
            {"description": plan.request.label, "prompt": plan.task, "run_in_background": True},
            ToolCallContext(parent=parent, cancel=CancelController().signal),
        )
        if started.is_error:
            return RunOutcome(tool, failure=RunFailure("could not start", started.text))
        job_id = started.text.rsplit(" ", 1)[-1]
        notify(started.text)
        snapshot = await _collect(runtime, job_id, parent, controller)
        return RunOutcome(tool, job=snapshot, job_output=runtime.jobs.read(job_id, parent))


async def _collect(
    runtime: Runtime, job_id: str, parent: ParentContext, controller: CancelController
) -> JobSnapshot:
    """Wait for the Job to end; a cancellation kills it."""

    def kill(reason: str) -> None:
        runtime.jobs.kill(job_id, parent, reason)

    remove = controller.signal.add_listener(kill)
    try:
        if controller.signal.aborted:  # cancelled while the job was starting
            kill(controller.signal.reason or "interrupted")
        snapshot = runtime.jobs.get(job_id, parent)
        while not snapshot.terminal:
            snapshot = await runtime.jobs.wait(job_id, _WAIT_MS, parent)
        return snapshot
    finally:
        remove()
