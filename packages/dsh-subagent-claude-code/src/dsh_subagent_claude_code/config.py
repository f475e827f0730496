"""Configuration of one named Claude Code provider instance, validated at load."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Final, Literal

from dsh_subagent import configured_cwd, env_overlay
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DEFAULT_DISPOSE_GRACE",
    "DEFAULT_PROVIDER_NAME",
    "MAX_DISPOSE_GRACE",
    "PERMISSION_MODES",
    "PREFIX",
    "ClaudeCodeConfig",
    "PermissionMode",
]

PREFIX: Final = "subagent-claude-code"
"""Prefix of every message this distribution writes."""

DEFAULT_PROVIDER_NAME: Final = "claude-code"
DEFAULT_DISPOSE_GRACE: Final = 3.0

# The subprocess seam bounds its own grace; this mirror keeps load-time validation
# independent of import order and is pinned equal to dsh_subprocess.MAX_GRACE_SECONDS
# by a test.
MAX_DISPOSE_GRACE: Final = 2147483.647

PermissionMode = Literal["dontAsk", "acceptEdits", "auto", "plan", "bypassPermissions"]
"""The five native modes the provider accepts (seed 004); ``dontAsk`` is the default.

``default`` and ``manual`` exist in the CLI but would wait for a human, so they are
configuration errors here rather than something the CLI is trusted to reject.
"""

PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = (
    "dontAsk",
    "acceptEdits",
    "auto",
    "plan",
    "bypassPermissions",
)


class ClaudeCodeConfig(BaseModel):
    """One Claude Code provider instance.

    Attributes:
        provider_name: Registry name of the instance; named instances coexist.
        model: Passed unchanged to the SDK's ``model`` option; omitted → the product's
            native settings choose.
        env: Explicit environment overlay on the credential-scrubbed host environment;
            the only way a key (e.g. ``ANTHROPIC_API_KEY``) reaches the CLI. ``None``
            removes an inherited variable.
        dispose_grace: Seconds between SIGTERM and SIGKILL when the CLI tree is torn down.
        permission_mode: The native permission mode every run uses.
        cwd: Working-directory override; relative paths resolve against the launch
            directory at load. Omitted → the parent session's cwd.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(default=DEFAULT_PROVIDER_NAME, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    env: Annotated[Mapping[str, str | None], env_overlay(PREFIX)] = Field(default_factory=dict)
    dispose_grace: float = DEFAULT_DISPOSE_GRACE
    permission_mode: PermissionMode = "dontAsk"
    cwd: Annotated[str | None, configured_cwd(PREFIX)] = None

    @field_validator("dispose_grace", mode="before")
    @classmethod
    def _positive_finite(cls, value: object) -> object:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"{PREFIX}: dispose_grace must be a positive finite number")
        if value > MAX_DISPOSE_GRACE:
            raise ValueError(f"{PREFIX}: dispose_grace must be no greater than {MAX_DISPOSE_GRACE}")
        return value
