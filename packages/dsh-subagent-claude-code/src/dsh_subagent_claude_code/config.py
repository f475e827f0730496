"""Configuration of one named Claude Code provider instance, validated at load."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from dsh_subagent import Grace, ProductConfig
from pydantic import AllowInfNan, Field, PositiveFloat, Strict

__all__ = [
    "DEFAULT_DISPOSE_GRACE",
    "DEFAULT_PROVIDER_NAME",
    "PERMISSION_MODES",
    "ClaudeCodeConfig",
    "PermissionMode",
    "UsdAmount",
]

DEFAULT_PROVIDER_NAME: Final = "claude-code"
DEFAULT_DISPOSE_GRACE: Final = 3.0

PermissionMode = Literal["dontAsk", "acceptEdits", "auto", "plan", "bypassPermissions"]
"""The five native modes the provider accepts; ``dontAsk`` is the default.

``default`` and ``manual`` exist in the CLI but would wait for a human, so they are
configuration errors here rather than something the CLI is trusted to reject.
"""

UsdAmount = Annotated[PositiveFloat, Strict(), AllowInfNan(False)]
"""A positive, finite amount of US dollars (a number, never a string or a boolean)."""

PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = (
    "dontAsk",
    "acceptEdits",
    "auto",
    "plan",
    "bypassPermissions",
)


class ClaudeCodeConfig(ProductConfig):
    """One Claude Code provider instance.

    The common fields (``env``, ``cwd``, ``dispose_grace``) and their load-time checks
    are :class:`dsh_subagent.ProductConfig`'s.

    Attributes:
        provider_name: Registry name of the instance; named instances coexist.
        model: Passed unchanged to the SDK's ``model`` option; omitted → the product's
            native settings choose.
        env: Explicit environment overlay on the credential-scrubbed host environment;
            the only way a key (e.g. ``ANTHROPIC_API_KEY``) reaches the CLI. ``None``
            removes an inherited variable.
        dispose_grace: Seconds between SIGTERM and SIGKILL when the CLI tree is torn
            down; also how long stdout may stay open after the CLI exited.
        permission_mode: The native permission mode every run uses.
        cwd: Working-directory override; relative paths resolve against the launch
            directory at load. Omitted → the parent session's cwd.
        deadline_seconds: Wall-clock bound of a run, startup included (the runtime's);
            none by default.
        idle_timeout_seconds: Longest stretch the CLI may write nothing (the runtime's);
            none by default.
        max_budget_usd: Claude Code's own cost cap for one run, passed as the SDK's
            ``max_budget_usd`` (``--max-budget-usd``): once the query's cost exceeds it
            the CLI stops and the run settles ``error`` with category
            ``error_max_budget_usd``. Omitted → no cap. The CLI checks it between
            model responses, so a run may end somewhat above it.
        continuation: Let Claude Code keep each run's session (no
            ``--no-session-persistence``) in its config directory (``CLAUDE_CONFIG_DIR``,
            else ``$HOME/.claude``) so a follow-up delegation from the same working
            directory can resume it (the SDK's ``resume``); results then carry a
            continuation handle. Off by default: nothing is kept on disk.
    """

    provider_name: str = Field(default=DEFAULT_PROVIDER_NAME, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    dispose_grace: Grace = DEFAULT_DISPOSE_GRACE
    permission_mode: PermissionMode = "dontAsk"
    max_budget_usd: UsdAmount | None = None
    continuation: bool = False
