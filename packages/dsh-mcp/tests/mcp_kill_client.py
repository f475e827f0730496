"""A separate MCP client process for the lifetime tests, which SIGKILL it mid-call.

``python mcp_kill_client.py PARAMS_JSON TOOL ARGUMENTS_JSON``: starts the server with the
official stdio client, initialises, calls the tool and waits for the answer (the test
kills this process first).
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main() -> None:
    params = StdioServerParameters.model_validate_json(sys.argv[1])
    tool, arguments = sys.argv[2], json.loads(sys.argv[3])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool(tool, arguments)


if __name__ == "__main__":
    anyio.run(main)
