"""Configuration of one named Codex provider instance (validated at load)."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from dsh_subagent import (
    SubagentError,
    assert_positive_finite,
    configured_cwd,
    env_overlay,
)
from dsh_subprocess import MAX_GRACE_SECONDS
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEFAULT_DISPOSE_GRACE", "PERMISSION_MODES", "PREFIX", "CodexConfig", "PermissionMode"]

PREFIX: Final = "subagent-codex"

PermissionMode = Literal["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]
PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = (
    "never",
    "approve-for-me",
    "dangerously-bypass-approvals-and-sandbox",
)

DEFAULT_DISPOSE_GRACE: Final = 3.0


class CodexConfig(BaseModel):
    """One Codex provider instance.

    Attributes:
        provider_name: Registry name of this instance (default ``codex``).
        model: Passed unchanged as ``model`` on every ``thread/start``; ``None`` leaves
            the model to native Codex configuration (``config.toml``).
        env: Overlay on the credential-scrubbed parent environment; ``None`` removes an
            inherited name. Product keys (e.g. ``OPENAI_API_KEY``) must be given here.
        dispose_grace: Seconds between SIGTERM and SIGKILL of the app-server tree.
        permission_mode: ``never`` (default; nothing is ever approved),
            ``approve-for-me`` (Codex's auto-reviewer decides inside a
            workspace-write sandbox) or ``dangerously-bypass-approvals-and-sandbox``.
        cwd: Working directory override; relative paths resolve against the launch
            directory at load. ``None`` inherits the parent session's cwd.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: Annotated[str, Field(min_length=1)] = "codex"
    model: Annotated[str, Field(min_length=1)] | None = None
    env: Annotated[dict[str, str | None], env_overlay(PREFIX)] = Field(default_factory=dict)
    dispose_grace: float = DEFAULT_DISPOSE_GRACE
    permission_mode: PermissionMode = "never"
    cwd: Annotated[str | None, configured_cwd(PREFIX)] = None

    @field_validator("dispose_grace", mode="before")
    @classmethod
    def _check_grace(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{PREFIX}: dispose_grace must be a positive finite number")
        try:
            assert_positive_finite(PREFIX, "dispose_grace", value, MAX_GRACE_SECONDS)
        except SubagentError as exc:  # pydantic names the field only for ValueError
            raise ValueError(exc.message) from None
        return value
