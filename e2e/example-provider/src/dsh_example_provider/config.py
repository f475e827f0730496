"""Configuration of the example provider, validated once at load."""

from __future__ import annotations

from dsh_subagent import SubagentError, assert_positive_finite, validate_configured_cwd
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ExampleConfig"]

PREFIX = "subagent-example"


class ExampleConfig(BaseModel):
    """One named instance of the example provider.

    Attributes:
        provider_name: Registry name of this instance.
        env: Overlay layered over the credential-scrubbed parent environment; the only
            way a variable the scrub removes (a key, a token) reaches the child.
        cwd: Optional working-directory override; validated here, at load. Omitted, the
            child runs in the delegating parent session's cwd.
        dispose_grace: Seconds between SIGTERM and SIGKILL when the run is torn down.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(default="example", min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    dispose_grace: float = 2.0

    @field_validator("cwd")
    @classmethod
    def _check_cwd(cls, value: str | None) -> str | None:
        try:
            return validate_configured_cwd(PREFIX, value)
        except SubagentError as exc:  # pydantic reports ValueErrors with the field name
            raise ValueError(exc.message) from exc

    @field_validator("dispose_grace")
    @classmethod
    def _check_grace(cls, value: float) -> float:
        try:
            return assert_positive_finite(PREFIX, "dispose_grace", value, MAX_GRACE_SECONDS)
        except SubagentError as exc:
            raise ValueError(exc.message) from exc
