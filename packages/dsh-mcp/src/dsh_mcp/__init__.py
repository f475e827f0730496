"""dsh-mcp: serve a profile's subagent and job tools to any MCP client.

``dsh mcp PROFILE.toml`` (or ``dsh-mcp PROFILE.toml``) is the command; the names below
let a program serve a composition itself.
"""

from dsh_mcp.cli import main
from dsh_mcp.http import LocalGuard, serve_http
from dsh_mcp.server import ToolServer, open_tool_server
from dsh_mcp.settings import McpSettings, ServerSettings, resolve_settings
from dsh_mcp.stdio import stdio_transport

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
