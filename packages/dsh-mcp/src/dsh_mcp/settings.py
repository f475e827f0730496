"""What ``dsh mcp`` is configured with: the profile's ``[mcp]`` table and the command line.

The profile table (every key optional)::

    [mcp]
    workspace = "../project"           # the parent session's workspace; relative to the profile
    max_concurrent_delegations = 4     # server-wide, background jobs included
    slot_wait_seconds = 30             # how long a call beyond the bound waits for a slot
    foreground_seconds = 45            # a call still running then continues as a background job
    session_idle_seconds = 1800        # HTTP: a session with nothing in flight this long ends

A flag wins over the table. The workspace is resolved once, at start, to an absolute
directory that must exist; a relative path is read against the profile file's directory
(never the server process's working directory, which an MCP client chooses and rarely
says). Without a configured workspace, each delegation uses the client's first declared
root, and fails loudly when the client declares none.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

from dsh_profiles.errors import ProfileError, UsageError
from dsh_profiles.profile import describe_validation_error
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "DEFAULT_FOREGROUND_SECONDS",
    "DEFAULT_MAX_CONCURRENT_DELEGATIONS",
    "DEFAULT_SESSION_IDLE_SECONDS",
    "DEFAULT_SLOT_WAIT_SECONDS",
    "MAX_FOREGROUND_SECONDS",
    "MAX_SESSION_IDLE_SECONDS",
    "MAX_SLOT_WAIT_SECONDS",
    "McpSettings",
    "ServerSettings",
    "resolve_settings",
]

DEFAULT_MAX_CONCURRENT_DELEGATIONS: Final = 4
DEFAULT_SLOT_WAIT_SECONDS: Final = 30.0
MAX_SLOT_WAIT_SECONDS: Final = 3600.0
DEFAULT_FOREGROUND_SECONDS: Final = 45.0
"""Below the 60-120 s after which MCP clients (Claude Desktop, Claude Code, Cursor) give up
on a tool call: a longer delegation reaches the client as a background job instead."""
MAX_FOREGROUND_SECONDS: Final = 86400.0
DEFAULT_SESSION_IDLE_SECONDS: Final = 1800.0
"""The MCP SDK's own default. Streamable HTTP has no connection per session: a client that
goes away without its DELETE is seen only as a session with no request in flight and no
open GET stream, and this long after that the session ends like a DELETE."""
MAX_SESSION_IDLE_SECONDS: Final = 86400.0
_MAX_DELEGATIONS: Final = 1024


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number of seconds")
    return value


SlotWait = Annotated[float, Field(gt=0, le=MAX_SLOT_WAIT_SECONDS), AfterValidator(_finite)]
Bound = Annotated[int, Field(ge=1, le=_MAX_DELEGATIONS, strict=True)]
ForegroundSeconds = Annotated[
    float, Field(gt=0, le=MAX_FOREGROUND_SECONDS), AfterValidator(_finite)
]
SessionIdle = Annotated[float, Field(gt=0, le=MAX_SESSION_IDLE_SECONDS), AfterValidator(_finite)]


class McpSettings(BaseModel):
    """The profile's ``[mcp]`` table.

    Attributes:
        workspace: The parent session's workspace; relative paths resolve against the
            profile file's directory. ``None``: the client's first declared root.
        max_concurrent_delegations: Server-wide bound on delegations running at once,
            background jobs included until they settle (1 to 1024).
        slot_wait_seconds: How long a delegation beyond the bound waits for a slot before
            it gets a tool error (0 < seconds <= 3600).
        foreground_seconds: How long a foreground delegation call waits for its run; a
            run still going then continues as a background job and the call returns its
            id (needs the profile's job tools; 0 < seconds <= 86400, default 45).
        session_idle_seconds: Over HTTP, how long a session may have no request in
            flight and no open GET stream before it ends as if the client had sent its
            DELETE: its calls are cancelled and its background jobs killed (0 < seconds
            <= 86400, default 1800).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    workspace: Annotated[str, Field(min_length=1)] | None = None
    max_concurrent_delegations: Bound = DEFAULT_MAX_CONCURRENT_DELEGATIONS
    slot_wait_seconds: SlotWait = DEFAULT_SLOT_WAIT_SECONDS
    foreground_seconds: ForegroundSeconds = DEFAULT_FOREGROUND_SECONDS
    session_idle_seconds: SessionIdle = DEFAULT_SESSION_IDLE_SECONDS


@dataclass(frozen=True)
class ServerSettings:
    """Resolved settings of one server process.

    Attributes:
        workspace: Absolute path of an existing directory, or ``None`` (client roots).
        max_concurrent_delegations: The server-wide bound.
        slot_wait_seconds: The bounded wait for a slot.
        foreground_seconds: How long a foreground delegation call waits before its run
            continues as a background job.
        session_idle_seconds: Over HTTP, how long an idle session lives before it ends.
    """

    workspace: str | None
    max_concurrent_delegations: int
    slot_wait_seconds: float
    foreground_seconds: float = DEFAULT_FOREGROUND_SECONDS
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS


def _table(raw: dict[str, object] | None, source: str) -> McpSettings:
    try:
        return McpSettings.model_validate(raw or {})
    except ValidationError as exc:
        lines = describe_validation_error(exc)
        problems = [line.replace("field '", "[mcp] field '", 1) for line in lines]
        raise ProfileError(source, problems) from None


def _directory(path: Path, what: str) -> str:
    resolved = path.expanduser().resolve()
    if not resolved.is_dir():
        raise UsageError(f"{what} {str(resolved)!r} is not an existing directory")
    return str(resolved)


def resolve_settings(
    table: dict[str, object] | None,
    profile_path: str | os.PathLike[str],
    *,
    workspace: str | None = None,
    max_concurrent_delegations: int | None = None,
    slot_wait_seconds: float | None = None,
    foreground_seconds: float | None = None,
    session_idle_seconds: float | None = None,
) -> ServerSettings:
    """Validate the ``[mcp]`` table, apply the flags over it and resolve the workspace.

    Args:
        table: The profile's raw ``[mcp]`` table (``None`` when absent).
        profile_path: The profile file; a relative ``workspace`` in it resolves
            against its directory.
        workspace: ``--workspace``; a relative path resolves against the current
            directory, since the user typed it there.
        max_concurrent_delegations: ``--max-concurrent-delegations``.
        slot_wait_seconds: ``--slot-wait-seconds``.
        foreground_seconds: ``--foreground-seconds``.
        session_idle_seconds: ``--session-idle-seconds``.

    Raises:
        ProfileError: the table is invalid (each problem names its ``[mcp]`` field).
        UsageError: a flag is out of range, or the workspace is not a directory.
    """
    source = str(profile_path)
    settings = _table(table, source)
    overrides: dict[str, object] = {}
    if max_concurrent_delegations is not None:
        overrides["max_concurrent_delegations"] = max_concurrent_delegations
    if slot_wait_seconds is not None:
        overrides["slot_wait_seconds"] = slot_wait_seconds
    if foreground_seconds is not None:
        overrides["foreground_seconds"] = foreground_seconds
    if session_idle_seconds is not None:
        overrides["session_idle_seconds"] = session_idle_seconds
    if overrides:
        try:
            settings = McpSettings.model_validate({**settings.model_dump(), **overrides})
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            flag = "--" + str(first["loc"][0]).replace("_", "-")
            raise UsageError(f"{flag}: {first['msg']}") from None
    resolved: str | None = None
    if workspace is not None:
        resolved = _directory(Path(workspace), "--workspace")
    elif settings.workspace is not None:
        base = Path(profile_path).resolve().parent
        resolved = _directory(base / settings.workspace, f"{source}: [mcp] workspace")
    return ServerSettings(
        workspace=resolved,
        max_concurrent_delegations=settings.max_concurrent_delegations,
        slot_wait_seconds=settings.slot_wait_seconds,
        foreground_seconds=settings.foreground_seconds,
        session_idle_seconds=settings.session_idle_seconds,
    )
