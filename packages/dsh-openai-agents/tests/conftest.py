"""Fixtures of the Agents SDK adapter tests.

The Agents SDK runs tool calls as asyncio tasks, so these tests run on asyncio only (the
cancellation bridge itself is tested on asyncio and trio in dsh-subagent). Tracing is
switched off for the whole session and its processors removed: the SDK would otherwise
try to export traces to its hosted backend, and these tests send traffic to loopback only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import set_trace_processors, set_tracing_disabled
from dsh_contract_tests.fixtures.keyless_profile import (
    AMBIENT_MODEL_VARIABLES,
    KeylessProducts,
    keyless_products,
)

# The scripted model module lives next to the tests; importlib mode does not add this directory.
sys.path.insert(0, str(Path(__file__).parent))

from oai_model import CLAUDE_ANSWER

set_trace_processors([])
set_tracing_disabled(True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def products(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeylessProducts]:
    """The real Codex and Claude Code behind loopback models, bound by one profile."""
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    with keyless_products(tmp_path, claude_answer=CLAUDE_ANSWER) as running:
        yield running
