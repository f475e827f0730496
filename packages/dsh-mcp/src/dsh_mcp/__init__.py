"""dsh-mcp: serve a profile's subagent and job tools to any MCP client.

``dsh mcp PROFILE.toml`` (or ``dsh-mcp PROFILE.toml``) is the command; the names below
let a program serve a composition itself. They are imported on first use (PEP 562), so
the stdio server never loads the HTTP stack.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_mcp.cli import main
    from dsh_mcp.http import LocalGuard, serve_http
    from dsh_mcp.server import ToolServer, open_tool_server
    from dsh_mcp.settings import McpSettings, ServerSettings, resolve_settings
    from dsh_mcp.stdio import stdio_transport

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_mcp").addHandler(logging.NullHandler())
logging.getLogger("dsh").addHandler(logging.NullHandler())  # dsh.calls, dsh.jobs

__all__ = [
    "LocalGuard",
    "McpSettings",
    "ServerSettings",
    "ToolServer",
    "main",
    "open_tool_server",
    "resolve_settings",
    "serve_http",
    "stdio_transport",
]

_SOURCES = {
    "main": "dsh_mcp.cli",
    "LocalGuard": "dsh_mcp.http",
    "serve_http": "dsh_mcp.http",
    "ToolServer": "dsh_mcp.server",
    "open_tool_server": "dsh_mcp.server",
    "McpSettings": "dsh_mcp.settings",
    "ServerSettings": "dsh_mcp.settings",
    "resolve_settings": "dsh_mcp.settings",
    "stdio_transport": "dsh_mcp.stdio",
}


def __getattr__(name: str) -> object:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'dsh_mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
