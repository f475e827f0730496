"""Which directory a delegation works in: the configured workspace, else the client's root.

Never the server process's own working directory: an MCP client starts the server
wherever it likes (often ``/`` or its own install directory), so falling back to it would
silently point a coding agent at the wrong tree. With neither a configured workspace nor
a usable root, the delegation fails with a tool error that says how to fix it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

import anyio
import mcp_types as types
from mcp.server.session import ServerSession

__all__ = ["NO_WORKSPACE", "ROOTS_TIMEOUT_SECONDS", "WorkspaceError", "client_root"]

ROOTS_TIMEOUT_SECONDS: Final = 10.0
"""How long the server waits for the client's answer to ``roots/list``."""

NO_WORKSPACE: Final = (
    "no workspace for this delegation: start dsh mcp with --workspace DIR, or set "
    "workspace in the profile's [mcp] table ({why})"
)


class WorkspaceError(Exception):
    """No usable workspace; the message is the tool error text."""


def _local_directory(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = Path(unquote(parsed.path))
    return os.path.normpath(path) if path.is_absolute() and path.is_dir() else None


async def client_root(session: ServerSession) -> str:
    """The first of the client's declared roots that is a local directory.

    Raises:
        WorkspaceError: the client declares no roots capability, does not answer in
            time, or lists no root that is an existing local directory.
    """
    if not session.check_client_capability(types.ClientCapabilities(roots=types.RootsCapability())):
        raise WorkspaceError(NO_WORKSPACE.format(why="this client declares no roots"))
    try:
        with anyio.fail_after(ROOTS_TIMEOUT_SECONDS):
            listed = await session.send_request(types.ListRootsRequest(), types.ListRootsResult)
    except TimeoutError:
        raise WorkspaceError(
            NO_WORKSPACE.format(why="the client did not answer roots/list in time")
        ) from None
    except Exception as exc:
        raise WorkspaceError(
            NO_WORKSPACE.format(why=f"roots/list failed: {type(exc).__name__}")
        ) from None
    for root in listed.roots:
        directory = _local_directory(str(root.uri))
        if directory is not None:
            return directory
    raise WorkspaceError(
        NO_WORKSPACE.format(why="none of the client's roots is an existing local directory")
    )
