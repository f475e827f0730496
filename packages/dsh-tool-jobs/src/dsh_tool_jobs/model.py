"""Value types of the Job runtime: the producer contract and the snapshots callers see.

A *producer* (a background subagent, a background shell, ...) hands the registry a
:class:`JobStart`. The registry runs admission, then calls ``run()`` synchronously and
gets :class:`JobHooks` back: a synchronous, idempotent ``cancel`` and a ``done``
awaitable that the registry awaits exactly once, in its own task group. ``done`` must
resolve only after the producer released every resource, and must not raise; one that
raises is a contract violation and settles the job ``failed``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

from dsh_subagent import ParentContext
from pydantic import BaseModel, ConfigDict

from dsh_tool_jobs.activity import JobActivity

__all__ = [
    "MAX_SAFE_INTEGER",
    "TERMINAL_STATUSES",
    "ChangeListener",
    "DoneListener",
    "JobHooks",
    "JobOutcome",
    "JobSnapshot",
    "JobStart",
    "JobStatus",
    "KillOutcome",
    "NoticeSink",
    "TerminalStatus",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Upper bound shared with the reference implementation for integer settings."""

JobStatus = Literal["running", "stopping", "completed", "killed", "failed"]
"""``running`` → optionally ``stopping`` → exactly one terminal status."""

TerminalStatus = Literal["completed", "killed", "failed"]

TERMINAL_STATUSES: Final[frozenset[str]] = frozenset({"completed", "killed", "failed"})

KillOutcome = Literal["requested", "already-finished"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class JobOutcome(BaseModel):
    """How a producer's work ended."""

    model_config = _FROZEN
    status: TerminalStatus
    detail: str | None = None
    """Rendered into the status line (for example ``exit code: 3``)."""
    output: str | None = None
    """The result of a final-output job; ``None`` reads as ``""``."""


@dataclass(frozen=True, slots=True)
class JobHooks:
    """What a producer's ``run()`` returns.

    Attributes:
        cancel: Request cancellation with an optional reason. Synchronous, idempotent, and
            must eventually make ``done`` resolve.
        done: Resolves with the outcome once every resource is released. Never raises.
        read_output: Optional consuming read of new output since the previous call; its
            presence makes a *stream* job. Without it the job is a *final-output* job.
        activity: Optional, synchronous and cheap: the job's progress so far as safe
            categories (see :class:`~dsh_tool_jobs.JobActivity`); ``job_list`` shows it.
    """

    cancel: Callable[[str | None], None]
    done: Awaitable[JobOutcome]
    read_output: Callable[[], str] | None = None
    activity: Callable[[], JobActivity] | None = None


@dataclass(frozen=True, slots=True)
class JobStart:
    """A request to register one background job.

    Attributes:
        kind: Non-empty job kind (``subagent``, ``bash``, ...); ids are ``<kind>-<N>``.
        label: Non-empty human label, shown in ``job_list`` and notices.
        owner: The owning parent; ``None`` makes an unowned job visible to everyone.
            Admission and cleanup use the object's identity, visibility its session id.
        run: Starts the work and returns its hooks. Called only after admission; if it
            raises nothing is registered and no id is used.
        output_limit_bytes: Optional UTF-8 byte bound on everything the model sees of
            this job (``job_output`` text and the completion notice).
    """

    kind: str
    label: str
    owner: ParentContext | None
    run: Callable[[], JobHooks]
    output_limit_bytes: int | None = None


class JobSnapshot(BaseModel):
    """A point-in-time copy of one job; each registry call returns a fresh one."""

    model_config = _FROZEN
    id: str
    kind: str
    label: str
    status: JobStatus
    detail: str | None = None
    output_limit_bytes: int | None = None
    owner_session: str | None = None
    started_at: int
    """Epoch milliseconds."""
    finished_at: int | None = None
    """Epoch milliseconds; present iff the status is terminal."""
    reported: bool
    """Whether the model already learnt the terminal state (suppresses the notice)."""
    activity: JobActivity | None = None
    """The producer's progress summary, for producers that keep one (subagent jobs)."""

    @property
    def terminal(self) -> bool:
        """Whether the job reached one of ``completed`` / ``killed`` / ``failed``."""
        return self.status in TERMINAL_STATUSES


ChangeListener = Callable[[ParentContext | None], None]
"""Called with the affected owner after registration, stopping, settlement and removal."""

DoneListener = Callable[[JobSnapshot, ParentContext | None], None]
"""Called once per settled job (after the change listeners), unless the registry closes."""

NoticeSink = Callable[[ParentContext, str], None]
"""Receives completion notices: the exact owner object captured at start, and the text."""
