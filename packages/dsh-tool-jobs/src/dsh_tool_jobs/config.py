"""Configuration of the job tools and the registry bound they share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dsh_tool_jobs.errors import JobError, JobErrorCode
from dsh_tool_jobs.model import MAX_SAFE_INTEGER

__all__ = ["JobsToolsConfig"]


class JobsToolsConfig(BaseModel):
    """Settings of ``job_output`` / ``job_list`` / ``job_kill`` and of the registry.

    Every field is a positive whole number (booleans and fractions are refused), at
    most ``2**53 - 1``; the default wait may not exceed the maximum wait.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    wait_timeout_ms: int = Field(default=30_000, strict=True, gt=0, le=MAX_SAFE_INTEGER)
    """How long ``job_output`` with ``wait: true`` waits when no ``timeout_ms`` is given."""
    max_wait_timeout_ms: int = Field(default=600_000, strict=True, gt=0, le=MAX_SAFE_INTEGER)
    """Upper clamp for any ``job_output`` wait."""
    max_concurrent_jobs_per_owner: int = Field(default=10, strict=True, gt=0, le=MAX_SAFE_INTEGER)
    """Admission bound per owner (``running`` and ``stopping`` jobs count)."""

    @model_validator(mode="after")
    def _default_wait_within_cap(self) -> Self:
        if self.wait_timeout_ms > self.max_wait_timeout_ms:
            raise ValueError(
                f"wait_timeout_ms ({self.wait_timeout_ms}) exceeds "
                f"max_wait_timeout_ms ({self.max_wait_timeout_ms})"
            )
        return self

    @classmethod
    def load(cls, data: Mapping[str, object] | None = None) -> JobsToolsConfig:
        """Validate a configuration table (for example a profile's ``[tools.jobs]``).

        Raises:
            JobError: ``INVALID_CONFIG`` whose message names every offending field.
        """
        try:
            return cls.model_validate(dict(data or {}))
        except ValidationError as exc:
            problems = []
            for error in exc.errors(include_url=False):
                where = ".".join(str(part) for part in error["loc"])
                message = str(error["msg"]).removeprefix("Value error, ")
                problems.append(f"{where}: {message}" if where else message)
            raise JobError(
                JobErrorCode.INVALID_CONFIG,
                "tool-jobs: invalid configuration: " + "; ".join(problems),
            ) from exc
