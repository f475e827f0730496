"""The model-facing job controls, independent of any tool-calling framework.

Each control takes the model's raw arguments, the caller (the parent the tool call
runs for) and, for ``job_output``, the tool call's cancel signal, and returns a
:class:`ControlReply`: the exact text the model sees, a JSON value for programs, and
whether it is an error. :mod:`dsh_tool_jobs.tools` adapts them to the subagent tool
protocol.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from dsh_subagent import CancelSignal, ParentContext
from pydantic import BaseModel, ConfigDict, JsonValue

from dsh_tool_jobs._describe import describe_error
from dsh_tool_jobs.activity import JobActivity
from dsh_tool_jobs.config import JobsToolsConfig
from dsh_tool_jobs.errors import JobError, JobErrorCode
from dsh_tool_jobs.model import JobSnapshot, JobStatus
from dsh_tool_jobs.registry import JobRegistry
from dsh_tool_jobs.render import (
    bound_error,
    bound_result,
    render_list,
    render_output,
    status_line,
)

__all__ = [
    "JOBS_SYSTEM_PROMPT",
    "JOB_KILL_DESCRIPTION",
    "JOB_KILL_SCHEMA",
    "JOB_LIST_DESCRIPTION",
    "JOB_LIST_SCHEMA",
    "JOB_OUTPUT_DESCRIPTION",
    "JOB_OUTPUT_SCHEMA",
    "ControlReply",
    "PublicJob",
    "job_kill",
    "job_list",
    "job_output",
]

JOB_OUTPUT_DESCRIPTION: Final = (
    "Read a background job. Stream jobs return only output since the previous read; "
    "final-output jobs return their result after settlement. Every response ends with "
    "`[status: ...]`. Reads are non-blocking unless `wait: true`, which waits up to the "
    "configured cap."
)
JOB_LIST_DESCRIPTION: Final = (
    "List your background jobs (running and finished) with their ids, kinds, and statuses."
)
# Unchanged although background subagents now add elapsed time, tokens and the last
# activity: the description is part of the model-visible schema snapshot.
JOB_KILL_DESCRIPTION: Final = (
    "Request cancellation of a running background job by job id. Returns immediately; the "
    "job settles as killed once its work actually stops."
)
JOBS_SYSTEM_PROMPT: Final = (
    "Track every background job id you start. You are notified in-session when a job "
    "finishes — do not busy-poll or sleep on one; keep working on independent steps and do "
    "not duplicate a running job's work. Before giving a final answer, collect every "
    "still-relevant job with job_output (set wait: true only when you are genuinely blocked "
    "on it), and job_kill jobs that stopped mattering."
)
"""The ``tool:jobs`` system-prompt section a host adds when it exposes the controls."""

_JOB_ID: Final[dict[str, JsonValue]] = {
    "type": "string",
    "minLength": 1,
    "description": "Job id returned by the tool that started the background work.",
}

JOB_OUTPUT_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {
        "job_id": _JOB_ID,
        "wait": {
            "type": "boolean",
            "description": "Block until the job finishes or the timeout expires. A timed-out "
            "wait is not an error: it returns [status: running] and the job keeps running.",
        },
        "timeout_ms": {
            "type": "number",
            "description": "Longest wait in milliseconds (only with wait: true). Defaults to "
            "the configured wait timeout and is capped by the configured maximum.",
        },
    },
    "required": ["job_id"],
    "additionalProperties": False,
}
JOB_LIST_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}
JOB_KILL_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {
        "job_id": _JOB_ID,
        "reason": {
            "type": "string",
            "description": "Why the job is no longer needed; forwarded to the job's work.",
        },
    },
    "required": ["job_id"],
    "additionalProperties": False,
}


class PublicJob(BaseModel):
    """What the model's tools expose of a job: no owner, no reported flag, no limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    kind: str
    label: str
    status: JobStatus
    detail: str | None = None
    started_at: int
    finished_at: int | None = None
    activity: JobActivity | None = None
    """Safe progress categories of a background subagent (never product text)."""

    @classmethod
    def of(cls, snapshot: JobSnapshot) -> PublicJob:
        """Project a registry snapshot."""
        return cls(
            id=snapshot.id,
            kind=snapshot.kind,
            label=snapshot.label,
            status=snapshot.status,
            detail=snapshot.detail,
            started_at=snapshot.started_at,
            finished_at=snapshot.finished_at,
            activity=snapshot.activity,
        )

    def value(self) -> dict[str, JsonValue]:
        """JSON value with absent optionals left out."""
        return self.model_dump(exclude_none=True)


@dataclass(frozen=True, slots=True)
class ControlReply:
    """One control's answer: model text, program value, error flag."""

    text: str
    value: JsonValue
    is_error: bool = False


def _job_limit(
    registry: JobRegistry, args: Mapping[str, object], caller: ParentContext | None
) -> int | None:
    """The ``output_limit_bytes`` of the job the call names, if the caller can see it."""
    job_id = args.get("job_id")
    if not isinstance(job_id, str) or not job_id:
        return None
    try:
        return registry.get(job_id, caller).output_limit_bytes
    except JobError:
        return None


def _failure(message: str, code: str, limit: int | None) -> ControlReply:
    """An error reply whose model-visible ``Error: <message>`` text stays within ``limit``."""
    return ControlReply(text=bound_error(message, limit), value={"error": code}, is_error=True)


def _error(exc: JobError, limit: int | None = None) -> ControlReply:
    return _failure(exc.message, exc.code.value, limit)


def _json(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _check_args(args: Mapping[str, object], allowed: tuple[str, ...]) -> None:
    for name in args:
        if name not in allowed:
            raise JobError(JobErrorCode.INVALID_ARGUMENT, f"unexpected argument {name}")


def _job_id(args: Mapping[str, object]) -> str:
    value = args.get("job_id")
    if not isinstance(value, str) or not value:
        raise JobError(
            JobErrorCode.INVALID_ARGUMENT,
            f"invalid job_id: expected a non-empty string, got {_json(value)}",
        )
    return value


async def job_output(
    registry: JobRegistry,
    config: JobsToolsConfig,
    args: Mapping[str, object],
    caller: ParentContext | None,
    signal: CancelSignal | None = None,
) -> ControlReply:
    """``job_output``: optionally wait (clamped to the configured cap), then read.

    A timed-out wait is not an error: it still reads and reports ``[status: running]``.
    ``timeout_ms`` is clamped here but its positivity is the registry's to check.
    """
    try:
        _check_args(args, ("job_id", "wait", "timeout_ms"))
        job_id = _job_id(args)
        wait = args.get("wait", False)
        if not isinstance(wait, bool):
            raise JobError(
                JobErrorCode.INVALID_ARGUMENT,
                f"invalid wait: expected a boolean, got {_json(wait)}",
            )
        timeout = args.get("timeout_ms")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float)
        ):
            raise JobError(
                JobErrorCode.INVALID_ARGUMENT,
                f"invalid timeout_ms: expected a number, got {_json(timeout)}",
            )
        if wait:
            requested = config.wait_timeout_ms if timeout is None else timeout
            if not math.isnan(requested):
                requested = min(requested, config.max_wait_timeout_ms)
            await registry.wait(job_id, requested, caller, signal)
        text = registry.read(job_id, caller)
        snapshot = registry.get(job_id, caller)
    except JobError as exc:
        return _error(exc, _job_limit(registry, args, caller))
    except Exception as exc:  # the producer's read_output raised
        return _failure(describe_error(exc), "READ_FAILED", _job_limit(registry, args, caller))
    return ControlReply(
        text=render_output(text, snapshot),
        value={"text": text, "job": PublicJob.of(snapshot).value()},
    )


def job_list(
    registry: JobRegistry, args: Mapping[str, object], caller: ParentContext | None
) -> ControlReply:
    """``job_list``: the caller's jobs and unowned jobs, one line each."""
    try:
        _check_args(args, ())
    except JobError as exc:
        return _error(exc)
    jobs = registry.list(caller)
    return ControlReply(text=render_list(jobs), value=[PublicJob.of(job).value() for job in jobs])


def job_kill(
    registry: JobRegistry, args: Mapping[str, object], caller: ParentContext | None
) -> ControlReply:
    """``job_kill``: request cancellation, then describe the job without consuming output."""
    try:
        _check_args(args, ("job_id", "reason"))
        job_id = _job_id(args)
        reason = args.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise JobError(
                JobErrorCode.INVALID_ARGUMENT,
                f"invalid reason: expected a string, got {_json(reason)}",
            )
        outcome = registry.kill(job_id, caller, reason or None)
        snapshot = registry.get(job_id, caller)
    except JobError as exc:
        return _error(exc, _job_limit(registry, args, caller))
    except Exception as exc:  # the producer's cancel raised: the job is unchanged
        return _failure(
            f"could not cancel job {args['job_id']}: {describe_error(exc)}",
            "CANCEL_FAILED",
            _job_limit(registry, args, caller),
        )
    kind: Literal["cancellation-requested", "already-finished"]
    if outcome == "requested":
        kind, text = "cancellation-requested", f"requested cancellation of job {job_id}"
    else:
        kind, text = (
            "already-finished",
            f"job {job_id} had already finished {status_line(snapshot)}",
        )
    return ControlReply(
        text=bound_result(text, snapshot.output_limit_bytes),
        value={"outcome": kind, "job": PublicJob.of(snapshot).value()},
    )
