"""The dsh-tool-jobs error hierarchy.

Every failure a caller (or the model, through the job tools) can observe is a
:class:`JobError` with a stable :class:`JobErrorCode`. Messages are the exact texts the
model sees; code, never message, is what programs branch on.

:class:`JobError` derives from :class:`dsh_subagent.tool_protocol.ToolError` because
every message is model-safe: a tool that lets one escape (the subagent tool when the
background launcher's preflight refuses) shows it as ``Error: <message>`` unchanged.
"""

from __future__ import annotations

from enum import StrEnum

from dsh_subagent.tool_protocol import ToolError

__all__ = ["JobError", "JobErrorCode"]


class JobErrorCode(StrEnum):
    """Stable codes carried by :class:`JobError`."""

    INVALID_SPEC = "INVALID_SPEC"
    """A ``JobStart`` field is invalid (empty kind or label, bad output limit)."""
    INVALID_CONFIG = "INVALID_CONFIG"
    """A registry or tools configuration value is invalid (raised at load)."""
    LIMIT_REACHED = "LIMIT_REACHED"
    """The owner's admission bucket is full."""
    UNKNOWN_JOB = "UNKNOWN_JOB"
    """No job has that id (or it was removed by owner disposal)."""
    FOREIGN_JOB = "FOREIGN_JOB"
    """The job belongs to another session."""
    INVALID_TIMEOUT = "INVALID_TIMEOUT"
    """A wait timeout is not a positive finite number of milliseconds."""
    WAIT_ABORTED = "WAIT_ABORTED"
    """The caller aborted a wait; the job keeps running."""
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    """A model-facing tool received an invalid argument."""
    UNAVAILABLE = "UNAVAILABLE"
    """The registry is not running, is closing, or the owner is being disposed."""


class JobError(ToolError):
    """Root of every error this distribution raises."""

    def __init__(self, code: JobErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def message(self) -> str:
        """The fixed-format message (safe to show to a model)."""
        return str(self.args[0])
