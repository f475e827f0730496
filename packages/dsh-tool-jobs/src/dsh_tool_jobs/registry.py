"""The Job registry: ids, state, admission, waits, kills, owner cleanup and notices.

Invariants this module owns:

* Ids are ``<kind>-<N>``; ``N`` is a per-kind counter shared by the whole registry and
  is taken only once ``run()`` succeeded, so a rejected start uses no number.
* A job is ``running``, maybe ``stopping``, then exactly one terminal status; the first
  outcome wins and later ones are ignored.
* Admission counts ``running`` and ``stopping`` jobs per owner *object* (unowned jobs
  share one bucket); a slot is freed only when the producer's ``done`` settles.
* Visibility is by owner *session id*; cleanup is by owner *object*.
* ``reported`` records that the model already learnt the terminal state. A terminal
  read, a kill, a wait that observed settlement, and teardown set it; ``get`` and
  ``list`` never do. A completion notice goes out only for an owned, unreported job.
* Waiters are counted before settlement and removed synchronously on abort, and
  settlement decides ``reported`` from that count before it releases anyone, so an
  abort in the same tick as settlement keeps the notice and a wait that saw the
  settlement suppresses it.

The registry is an async context manager owning one task group: every producer's
``done`` is awaited there. Leaving it cancels every job with ``jobs service disposed``,
waits for all of them and sends no notice. An exception raised in the ``async with``
body reaches the caller as itself, never wrapped in an ``ExceptionGroup``; an error of
the registry's own tasks while it propagates is logged and attached to it as a note.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Literal, Self, TypeVar

import anyio
from anyio.abc import TaskGroup
from dsh_subagent import CancelSignal, ParentContext

from dsh_tool_jobs._describe import describe_error
from dsh_tool_jobs.activity import JobActivity
from dsh_tool_jobs.errors import JobError, JobErrorCode
from dsh_tool_jobs.model import (
    MAX_SAFE_INTEGER,
    TERMINAL_STATUSES,
    ChangeListener,
    DoneListener,
    JobHooks,
    JobOutcome,
    JobSnapshot,
    JobStart,
    JobStatus,
    KillOutcome,
    NoticeSink,
)
from dsh_tool_jobs.render import notice_text

__all__ = [
    "DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER",
    "OWNER_DISPOSED",
    "SERVICE_DISPOSED",
    "JobRegistry",
    "validate_job_limit",
]

_log = logging.getLogger("dsh_tool_jobs")

_L = TypeVar("_L")

DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER: Final = 10
OWNER_DISPOSED: Final = "owner disposed"
SERVICE_DISPOSED: Final = "jobs service disposed"


def validate_job_limit(value: object, name: str = "max_concurrent_jobs_per_owner") -> int:
    """Return ``value`` if it is a positive safe integer, else raise ``INVALID_CONFIG``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SAFE_INTEGER:
        raise JobError(
            JobErrorCode.INVALID_CONFIG,
            f"invalid {name}: expected a positive safe integer, got {value!r}",
        )
    return value


def _now_ms() -> int:
    return int(time.time() * 1000)


def _json(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


@dataclass(eq=False)
class _Waiter:
    event: anyio.Event = field(default_factory=anyio.Event)
    state: Literal["waiting", "released", "aborted", "gone"] = "waiting"


@dataclass(eq=False)
class _Record:
    id: str
    kind: str
    label: str
    owner: ParentContext | None
    hooks: JobHooks
    output_limit_bytes: int | None
    started_at: int
    status: JobStatus = "running"
    detail: str | None = None
    output: str | None = None
    finished_at: int | None = None
    reported: bool = False
    waiters: list[_Waiter] = field(default_factory=list)
    settled: anyio.Event = field(default_factory=anyio.Event)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(
            id=self.id,
            kind=self.kind,
            label=self.label,
            status=self.status,
            detail=self.detail,
            output_limit_bytes=self.output_limit_bytes,
            owner_session=None if self.owner is None else self.owner.session_id,
            started_at=self.started_at,
            finished_at=self.finished_at,
            reported=self.reported,
            activity=self._activity(),
        )

    def _activity(self) -> JobActivity | None:
        if self.hooks.activity is None:
            return None
        try:
            return self.hooks.activity()
        except Exception:
            _log.exception("jobs: activity of %s raised", self.id)
            return None


class JobRegistry:
    """Registry of background jobs (the seeds' ``ctx.jobs``).

    Args:
        max_concurrent_jobs_per_owner: Admission bound per owner object (default 10).
        notice_sink: Receives ``(owner, text)`` completion notices for owned jobs whose
            terminal state the model has not seen yet. Exceptions it raises are logged.

    Raises:
        JobError: ``INVALID_CONFIG`` when the bound is not a positive safe integer.
    """

    def __init__(
        self,
        *,
        max_concurrent_jobs_per_owner: int = DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER,
        notice_sink: NoticeSink | None = None,
    ) -> None:
        self._limit = validate_job_limit(max_concurrent_jobs_per_owner)
        self._notice_sink = notice_sink
        self._records: dict[str, _Record] = {}
        self._counters: dict[str, int] = {}
        self._change_listeners: list[ChangeListener] = []
        self._done_listeners: list[DoneListener] = []
        self._disposing: dict[int, ParentContext] = {}
        self._watchers: dict[str, anyio.CancelScope] = {}
        self._task_group: TaskGroup | None = None
        self._state: Literal["new", "open", "closing", "closed"] = "new"

    @property
    def max_concurrent_jobs_per_owner(self) -> int:
        """The admission bound per owner."""
        return self._limit

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise JobError(JobErrorCode.UNAVAILABLE, "a job registry can be entered only once")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._task_group is not None
        try:
            with anyio.CancelScope(shield=True):
                await self._shutdown()
        finally:
            result = await _leave_task_group(self._task_group, exc_type, exc, tb)
        return result

    async def _shutdown(self) -> None:
        # Listeners close first: nothing settled from here on produces a done event.
        self._state = "closing"
        records = list(self._records.values())
        for record in records:
            if not record.terminal:
                self._teardown_cancel(record, SERVICE_DISPOSED)
        for record in records:
            await record.settled.wait()
        # Force-failed jobs never got their producer's outcome; stop awaiting it.
        for scope in list(self._watchers.values()):
            scope.cancel()
        self._records.clear()
        notified: list[ParentContext | None] = []
        for record in records:
            if not any(owner is record.owner for owner in notified):
                notified.append(record.owner)
                self._changed(record.owner)
        self._state = "closed"

    # -- listeners -----------------------------------------------------------------

    def on_change(self, listener: ChangeListener) -> Callable[[], None]:
        """Register a change listener; returns an idempotent remover."""
        return _add(self._change_listeners, listener)

    def on_done(self, listener: DoneListener) -> Callable[[], None]:
        """Register a done listener; returns an idempotent remover."""
        return _add(self._done_listeners, listener)

    # -- start ---------------------------------------------------------------------

    def start(self, spec: JobStart) -> str:
        """Admit, start and register one job; returns its id.

        Runs synchronously: validation, admission, ``spec.run()``, then id allocation.
        Any failure leaves no record, no id and no resource behind.

        Raises:
            JobError: ``UNAVAILABLE``, ``INVALID_SPEC`` or ``LIMIT_REACHED``.
        """
        if self._state != "open" or self._task_group is None:
            raise JobError(
                JobErrorCode.UNAVAILABLE,
                "background jobs unavailable: the job registry is not running",
            )
        if not isinstance(spec.kind, str) or not spec.kind:
            raise JobError(
                JobErrorCode.INVALID_SPEC, "invalid job kind: expected a non-empty string"
            )
        if not isinstance(spec.label, str) or not spec.label:
            raise JobError(
                JobErrorCode.INVALID_SPEC, "invalid job label: expected a non-empty string"
            )
        limit_bytes = spec.output_limit_bytes
        if limit_bytes is not None and (
            isinstance(limit_bytes, bool)
            or not isinstance(limit_bytes, int)
            or not 1 <= limit_bytes <= MAX_SAFE_INTEGER
        ):
            raise JobError(
                JobErrorCode.INVALID_SPEC,
                "invalid output_limit_bytes: expected a positive safe integer, got "
                + _json(limit_bytes),
            )
        owner = spec.owner
        if owner is not None and self._disposing.get(id(owner)) is owner:
            raise JobError(
                JobErrorCode.UNAVAILABLE, "background jobs unavailable: the owner is being disposed"
            )
        active = sum(
            1 for record in self._records.values() if record.owner is owner and not record.terminal
        )
        if active >= self._limit:
            raise JobError(
                JobErrorCode.LIMIT_REACHED,
                f"background job limit reached for this owner (limit: {self._limit}); "
                "use job_kill to stop an unneeded job, wait for it to finish, then retry",
            )
        hooks = spec.run()
        number = self._counters.get(spec.kind, 0) + 1
        self._counters[spec.kind] = number
        record = _Record(
            id=f"{spec.kind}-{number}",
            kind=spec.kind,
            label=spec.label,
            owner=owner,
            hooks=hooks,
            output_limit_bytes=limit_bytes,
            started_at=_now_ms(),
        )
        self._records[record.id] = record
        # Shielded: a cancellation from around the registry must not end the watcher
        # before exit has cancelled the job and awaited its settlement (exit would wait
        # forever); exit cancels this scope itself once every job settled.
        scope = anyio.CancelScope(shield=True)
        self._watchers[record.id] = scope
        self._task_group.start_soon(self._watch, record, scope, name=f"job {record.id}")
        self._changed(owner)
        return record.id

    async def _watch(self, record: _Record, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    outcome = await record.hooks.done
                    if not isinstance(outcome, JobOutcome):
                        raise TypeError(f"done resolved to {type(outcome).__name__}")
                except Exception as exc:
                    _log.error(
                        "jobs: job %s producer done raised (producer contract violation): %s",
                        record.id,
                        describe_error(exc),
                        exc_info=exc,
                    )
                    outcome = JobOutcome(status="failed", detail=describe_error(exc))
                self._settle(record, outcome)
        finally:
            self._watchers.pop(record.id, None)

    def _settle(self, record: _Record, outcome: JobOutcome) -> None:
        if record.terminal:
            return  # first outcome wins
        record.status = outcome.status
        record.detail = outcome.detail
        record.output = outcome.output
        record.finished_at = _now_ms()
        # Decided from the waiter count, before anyone is released (see module docstring).
        if record.waiters:
            record.reported = True
        waiters, record.waiters = record.waiters, []
        for waiter in waiters:
            waiter.state = "released"
            waiter.event.set()
        record.settled.set()
        self._changed(record.owner)
        if self._state != "open":
            return
        snapshot = record.snapshot()
        for listener in list(self._done_listeners):
            try:
                listener(snapshot, record.owner)
            except Exception:
                _log.exception("jobs: done listener raised for %s", record.id)
        if record.owner is not None and not snapshot.reported and self._notice_sink is not None:
            try:
                self._notice_sink(record.owner, notice_text(snapshot))
            except Exception:
                _log.exception("jobs: notice sink raised for %s", record.id)

    # -- access --------------------------------------------------------------------

    def _access(self, job_id: str, caller: ParentContext | None) -> _Record:
        record = self._records.get(job_id)
        if record is None:
            raise JobError(JobErrorCode.UNKNOWN_JOB, f"unknown job {job_id}")
        if record.owner is not None and (
            caller is None or caller.session_id != record.owner.session_id
        ):
            raise JobError(JobErrorCode.FOREIGN_JOB, f"job {job_id} belongs to another session")
        return record

    def get(self, job_id: str, caller: ParentContext | None) -> JobSnapshot:
        """Snapshot one job without consuming output or marking it reported.

        Raises:
            JobError: ``UNKNOWN_JOB`` or ``FOREIGN_JOB``.
        """
        return self._access(job_id, caller).snapshot()

    def list(self, caller: ParentContext | None) -> list[JobSnapshot]:
        """The caller's session's jobs plus every unowned job, in registration order."""
        return [
            record.snapshot()
            for record in self._records.values()
            if record.owner is None
            or (caller is not None and caller.session_id == record.owner.session_id)
        ]

    def read(self, job_id: str, caller: ParentContext | None) -> str:
        """Read a job's output.

        A final-output job reads ``""`` while live and its result once terminal,
        idempotently. A stream job returns the output produced since the previous read
        (and, once terminal, its result after it). A read of a terminal job marks it
        reported.

        Raises:
            JobError: ``UNKNOWN_JOB`` or ``FOREIGN_JOB``.
        """
        record = self._access(job_id, caller)
        text = ""
        if record.hooks.read_output is not None:
            text = record.hooks.read_output()
        if record.terminal:
            if record.output:
                separator = "" if not text or text.endswith("\n") else "\n"
                text = text + separator + record.output
            record.reported = True
        return text

    async def wait(
        self,
        job_id: str,
        timeout_ms: float,
        caller: ParentContext | None,
        signal: CancelSignal | None = None,
    ) -> JobSnapshot:
        """Wait up to ``timeout_ms`` for a job to settle.

        Returns the terminal snapshot (marked reported) when the job settles in time,
        or the live snapshot when the timeout expires; a timeout is not an error.

        Raises:
            JobError: ``UNKNOWN_JOB`` / ``FOREIGN_JOB``; ``INVALID_TIMEOUT`` for a timeout
                that is not a positive finite number; ``WAIT_ABORTED`` (``wait aborted``)
                when ``signal`` aborts first. The job keeps running after an abort.
        """
        record = self._access(job_id, caller)
        if (
            isinstance(timeout_ms, bool)
            or not isinstance(timeout_ms, int | float)
            or not math.isfinite(timeout_ms)
            or timeout_ms <= 0
        ):
            raise JobError(
                JobErrorCode.INVALID_TIMEOUT,
                "invalid wait timeout: expected a positive number of milliseconds, got "
                + _json(timeout_ms),
            )
        if record.terminal:
            record.reported = True
            return record.snapshot()
        if signal is not None and signal.aborted:
            raise JobError(JobErrorCode.WAIT_ABORTED, "wait aborted")
        waiter = _Waiter()
        record.waiters.append(waiter)

        def on_abort(_reason: str) -> None:
            if waiter.state == "waiting":
                waiter.state = "aborted"
                record.waiters.remove(waiter)
                waiter.event.set()

        remove_listener = signal.add_listener(on_abort) if signal is not None else None
        try:
            with anyio.move_on_after(timeout_ms / 1000):
                await waiter.event.wait()
        finally:
            if remove_listener is not None:
                remove_listener()
            if waiter.state == "waiting":
                waiter.state = "gone"
                record.waiters.remove(waiter)
        if waiter.state == "aborted":
            raise JobError(JobErrorCode.WAIT_ABORTED, "wait aborted")
        return record.snapshot()

    def kill(
        self, job_id: str, caller: ParentContext | None, reason: str | None = None
    ) -> KillOutcome:
        """Request cancellation; returns ``requested`` or ``already-finished``.

        ``cancel`` is called before any state change: if it raises, the error
        propagates and nothing changes. Otherwise the job becomes ``stopping`` and
        reported (a model-requested kill gets no notice); it still holds its admission
        slot until the producer's ``done`` settles.

        Raises:
            JobError: ``UNKNOWN_JOB`` or ``FOREIGN_JOB``.
        """
        record = self._access(job_id, caller)
        if record.terminal:
            record.reported = True
            return "already-finished"
        record.hooks.cancel(reason)
        record.reported = True
        record.status = "stopping"
        self._changed(record.owner)
        return "requested"

    # -- owner cleanup -------------------------------------------------------------

    async def dispose_owner(self, owner: ParentContext) -> None:
        """Cancel, await and remove every job of this exact owner object; no notices.

        Each live job is marked reported first, then cancelled with ``owner disposed``.
        A job whose cancel raises is force-failed at once (its work may be orphaned)
        instead of being awaited. Jobs of another object with the same session id are
        untouched. Starts for this owner are refused while the disposal runs.
        """
        key = id(owner)
        nested = self._disposing.get(key) is owner
        self._disposing[key] = owner
        try:
            owned = [record for record in self._records.values() if record.owner is owner]
            for record in owned:
                if not record.terminal:
                    self._teardown_cancel(record, OWNER_DISPOSED)
            for record in owned:
                await record.settled.wait()
            removed = [record for record in owned if self._records.pop(record.id, None)]
            if removed:
                self._changed(owner)
        finally:
            if not nested:
                self._disposing.pop(key, None)

    def _teardown_cancel(self, record: _Record, reason: str) -> None:
        record.reported = True
        try:
            record.hooks.cancel(reason)
        except Exception as exc:
            _log.error(
                "jobs: cancel of %s threw during teardown; job record forced failed and "
                "work may be orphaned: %s",
                record.id,
                describe_error(exc),
                exc_info=exc,
            )
            self._settle(
                record,
                JobOutcome(
                    status="failed",
                    detail="cancel threw during teardown; work may be orphaned: "
                    + describe_error(exc),
                ),
            )
            return
        record.status = "stopping"
        self._changed(record.owner)

    def _changed(self, owner: ParentContext | None) -> None:
        for listener in list(self._change_listeners):
            try:
                listener(owner)
            except Exception:
                _log.exception("jobs: change listener raised")


async def _leave_task_group(
    task_group: TaskGroup,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool | None:
    """Exit ``task_group`` so that an exception from the body propagates unwrapped.

    A cancellation is handed to the group (its cancel scope must see it). Any other body
    exception is kept from the group, which anyio would wrap in an ``ExceptionGroup``:
    the group is cancelled and exits as if the body had finished, and the body's
    exception propagates as itself, carrying a note for each error of the group's tasks.
    """
    if exc is None or isinstance(exc, anyio.get_cancelled_exc_class()):
        return await task_group.__aexit__(exc_type, exc, tb)
    task_group.cancel_scope.cancel()
    try:
        await task_group.__aexit__(None, None, None)
    except ExceptionGroup as group:
        for error in group.exceptions:
            line = f"jobs: registry exit failed: {describe_error(error)}"
            _log.error("%s", line)
            exc.add_note(line)
    return None


def _add(listeners: list[_L], listener: _L) -> Callable[[], None]:
    listeners.append(listener)

    def remove() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return remove
