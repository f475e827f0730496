"""Configuration of the example provider, validated once at load."""

from __future__ import annotations

from typing import Annotated

from dsh_subagent import (
    SubagentError,
    assert_positive_finite,
    configured_cwd,
    env_overlay,
)
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
    env: Annotated[dict[str, str], env_overlay(PREFIX)] = Field(default_factory=dict)
    cwd: Annotated[str | None, configured_cwd(PREFIX)] = None
    dispose_grace: float = 2.0

    @field_validator("dispose_grace")
    @classmethod
    def _check_grace(cls, value: float) -> float:
        try:
            return assert_positive_finite(PREFIX, "dispose_grace", value, MAX_GRACE_SECONDS)
        except SubagentError as exc:
            raise ValueError(exc.message) from exc
