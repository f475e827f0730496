"""Puts this directory on ``sys.path`` for the shared helpers (``mcp_sandbox``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mcp_sandbox import Sandbox, make_sandbox


@pytest.fixture
def anyio_backend() -> str:
    # The official MCP client drives the server from asyncio; the server itself always
    # runs on asyncio (its HTTP transport needs it).
    return "asyncio"


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)
