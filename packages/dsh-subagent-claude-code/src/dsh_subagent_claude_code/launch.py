"""What one run hands the SDK and the CLI: SDK options, the CLI argv, the env overlay.

The argv comes from the pinned SDK's own builder (``SubprocessCLITransport._build_command``)
so every option is turned into the exact flags the SDK would pass; only the process
spawn is ours. ``tests/test_config_launch.py`` pins the builder's presence and output against
the installed SDK, so an SDK upgrade that moves it fails loudly.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk import __version__ as sdk_version
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_agent_sdk.types import CanUseTool, HookCallback
from dsh_subprocess import child_env

from dsh_subagent_claude_code.config import PermissionMode

__all__ = [
    "DANGEROUS_CONFIRMATION_FLAG",
    "DISALLOWED_TOOLS",
    "build_cli_argv",
    "build_env_overlay",
    "build_sdk_options",
    "session_file",
]

DISALLOWED_TOOLS: Final = ("AskUserQuestion",)
"""Tools no unattended run may use: they wait for a human."""

DANGEROUS_CONFIRMATION_FLAG: Final = "allow-dangerously-skip-permissions"
"""The CLI's explicit dangerous confirmation (the TypeScript SDK's
``allowDangerouslySkipPermissions``); the Python SDK has no field, so it travels as an
extra argument, and only with ``bypassPermissions``."""

NO_SESSION_PERSISTENCE_FLAG: Final = "no-session-persistence"


def build_sdk_options(
    *,
    cwd: str,
    permission_mode: PermissionMode,
    model: str | None,
    env: Mapping[str, str | None],
    can_use_tool: CanUseTool | None,
    elicitation_hook: HookCallback,
    max_budget_usd: float | None = None,
    persist_session: bool = False,
    resume: str | None = None,
) -> ClaudeAgentOptions:
    """The SDK options of one run.

    The session is kept on disk only with ``persist_session`` (continuation enabled);
    ``resume`` continues a kept session (the SDK's own option, ``--resume=<id>``).

    ``setting_sources`` stays unset on purpose: the SDK default loads the host's native
    user, project and local settings relative to ``cwd``, never copied or modified.
    ``max_turns`` and ``system_prompt`` are SDK defaults too; the wall-clock bounds are
    the runtime's. ``max_budget_usd`` is the product's own cost cap (``None``: none).
    """
    disallowed = list(DISALLOWED_TOOLS)
    if permission_mode == "plan":
        # Native allow rules must not switch a plan-only run back to execution.
        disallowed.append("ExitPlanMode")
    extra_args: dict[str, str | None] = (
        {} if persist_session else {NO_SESSION_PERSISTENCE_FLAG: None}
    )
    if permission_mode == "bypassPermissions":
        extra_args[DANGEROUS_CONFIRMATION_FLAG] = None
    # "Elicitation" is a CLI hook event the 0.2.189 HookEvent Literal does not list yet.
    hooks = cast(Any, {"Elicitation": [HookMatcher(hooks=[elicitation_hook])]})
    return ClaudeAgentOptions(
        cwd=cwd,
        permission_mode=permission_mode,
        model=model,
        env={name: value for name, value in env.items() if value is not None},
        disallowed_tools=disallowed,
        extra_args=extra_args,
        can_use_tool=can_use_tool,
        hooks=hooks,
        max_budget_usd=max_budget_usd,
        resume=resume,
    )


def build_cli_argv(options: ClaudeAgentOptions, cli_prefix: Sequence[str]) -> list[str]:
    """The CLI argv exactly as the pinned SDK builds it for ``options``.

    ``query()`` routes permission prompts over the control protocol when ``can_use_tool``
    is set (``--permission-prompt-tool stdio``); that flag is added the same way here.

    Args:
        options: The run's SDK options.
        cli_prefix: The command that starts the CLI (the bundled binary in production).
    """
    if options.can_use_tool is not None:
        options = dataclasses.replace(options, permission_prompt_tool_name="stdio")
    builder = SubprocessCLITransport(
        prompt="", options=dataclasses.replace(options, cli_path="cli")
    )
    argv = builder._build_command()
    return [*cli_prefix, *argv[1:]]


def build_env_overlay(env: Mapping[str, str | None], cwd: str) -> dict[str, str | None]:
    """The overlay on the scrubbed host environment, mirroring the SDK's own additions.

    The SDK sets ``CLAUDE_CODE_ENTRYPOINT`` (overridable), the SDK version, the session
    state opt-in its run-end detection reads and ``PWD``, and drops ``CLAUDECODE``. The
    host environment itself is never copied here: ``dsh_subprocess`` supplies the
    credential-scrubbed base.
    """
    overlay: dict[str, str | None] = {"CLAUDECODE": None, "CLAUDE_CODE_ENTRYPOINT": "sdk-py"}
    overlay.update(env)
    overlay["CLAUDE_AGENT_SDK_VERSION"] = sdk_version
    if not any(name.upper() == "CLAUDE_CODE_SDK_READS_SESSION_STATE" for name in overlay):
        overlay["CLAUDE_CODE_SDK_READS_SESSION_STATE"] = "1"
    overlay["PWD"] = cwd
    return overlay


def session_file(env: Mapping[str, str | None], cwd: str, session: str) -> Path:
    """Where Claude Code keeps ``session`` of a run in ``cwd``: ``projects/<cwd with every
    character outside [A-Za-z0-9] replaced by "-">/<session>.jsonl`` under the child's
    config directory (``CLAUDE_CONFIG_DIR`` of the overlaid environment, else
    ``$HOME/.claude``). The CLI resumes a session only from the directory it ran in.

    ``session`` is a continuation handle's id (its alphabet has no path separator).
    """
    project = re.sub(r"[^A-Za-z0-9]", "-", cwd)
    return Path(config_dir(env)) / "projects" / project / f"{session}.jsonl"


def config_dir(env: Mapping[str, str | None]) -> str:
    """The child's config directory: ``CLAUDE_CONFIG_DIR`` of the overlaid environment,
    else ``$HOME/.claude``."""
    environment = child_env(env)
    return environment.get("CLAUDE_CONFIG_DIR") or os.path.join(
        environment.get("HOME") or os.path.expanduser("~"), ".claude"
    )
