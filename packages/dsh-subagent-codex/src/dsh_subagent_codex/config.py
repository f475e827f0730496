"""Configuration of one named Codex provider instance (validated at load)."""

from __future__ import annotations

import os
from typing import Annotated, Final, Literal

from dsh_subagent import Grace, ProductConfig
from pydantic import Field, ValidationInfo, field_validator

__all__ = ["DEFAULT_DISPOSE_GRACE", "PERMISSION_MODES", "CodexConfig", "PermissionMode"]

PermissionMode = Literal["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]
"""The three native permission modes (see the package README)."""

PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = (
    "never",
    "approve-for-me",
    "dangerously-bypass-approvals-and-sandbox",
)

DEFAULT_DISPOSE_GRACE: Final = 3.0


class CodexConfig(ProductConfig):
    """One Codex provider instance.

    The shared fields and their load-time checks (``env`` overlay, ``cwd`` override,
    ``dispose_grace``) come from :class:`dsh_subagent.ProductConfig`.

    Attributes:
        provider_name: Registry name of this instance (default ``codex``).
        model: Passed unchanged as ``model`` on every ``thread/start``; ``None`` leaves
            the model to native Codex configuration (``config.toml``).
        env: Overlay on the credential-scrubbed parent environment; ``None`` removes an
            inherited name. Product keys (e.g. ``OPENAI_API_KEY``) must be given here.
        dispose_grace: Seconds between SIGTERM and SIGKILL of the app-server tree
            (default 3).
        permission_mode: ``never`` (default; nothing is ever approved),
            ``approve-for-me`` (Codex's auto-reviewer decides inside a
            workspace-write sandbox) or ``dangerously-bypass-approvals-and-sandbox``.
        cwd: Working directory override; relative paths resolve against the launch
            directory at load. ``None`` inherits the parent session's cwd.
        continuation: Keep each run's thread (``ephemeral: false``) so a follow-up
            delegation can continue it (``thread/resume``); results then carry a
            continuation handle. Needs a product home that persists across runs, so
            ``env`` must set ``CODEX_HOME`` to an absolute directory (refused at load
            otherwise). Off by default: every thread is ephemeral and no session is
            kept on disk.
    """

    provider_name: str = Field(default="codex", min_length=1)
    model: Annotated[str, Field(min_length=1)] | None = None
    dispose_grace: Grace = DEFAULT_DISPOSE_GRACE
    permission_mode: PermissionMode = "never"
    continuation: bool = False

    @field_validator("continuation")
    @classmethod
    def _persistent_home(cls, value: bool, info: ValidationInfo) -> bool:
        home = (info.data.get("env") or {}).get("CODEX_HOME")
        if value and not (isinstance(home, str) and os.path.isabs(home)):
            raise ValueError(
                "continuation keeps threads in the product home, so env.CODEX_HOME must name "
                "an absolute directory that persists across runs"
            )
        return value
