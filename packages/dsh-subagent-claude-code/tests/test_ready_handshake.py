"""A ready Claude Code CLI taken past the Agent SDK's ``initialize`` before its task
(``open_ahead``), against the scripted stand-in CLI: the handshake a ready CLI failed
leaves the delegation to a cold start, and the callbacks the SDK registered at that
early handshake serve the delegation that claims the CLI, as a cold run's do.
The real CLI's side is e2e/test_ready_tier.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_harness import Standin
from dsh_subagent import (
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent.ready import ReadyPool
from dsh_subagent_claude_code.ahead import Connected

pytestmark = pytest.mark.anyio

ANSWER: list[dict[str, Any]] = [
    {"op": "init"},
    {"op": "assistant", "text": "done"},
    {"op": "result", "result": "done"},
]
ASKS: list[dict[str, Any]] = [
    {"op": "init"},
    {"op": "can_use_tool", "tool_name": "Write", "input": {"file_path": "x"}},
    {"op": "result", "subtype": "error_during_execution", "is_error": True},
]


async def _result(service: SubagentService, name: str, cwd: Path) -> SubagentResult:
    request = SubagentStartRequest(
        prompt=(TextBlock(text="the task"),), parent=ParentContext(session_id="p", cwd=str(cwd))
    )
    run = await service.start(name, request)
    with anyio.fail_after(60):
        result = await run.result()
    await run.dispose()
    return result


async def _pool(service: SubagentService, name: str, cwd: Path) -> ReadyPool:
    assert service.keep_ready(name, str(cwd))
    pool = service.ready_pool(name)
    assert pool is not None
    return pool


async def test_a_refused_initialize_leaves_the_delegation_to_a_cold_start(
    standin: Standin, caplog: pytest.LogCaptureFixture
) -> None:
    refused = standin.path("refused")
    provider = standin.provider(
        ANSWER, env={"STANDIN_REFUSE_INITIALIZE_ONCE": str(refused)}, warm=1
    )
    async with SubagentService() as service:
        service.register_provider(provider)
        pool = await _pool(service, provider.name, standin.workspace)
        with anyio.fail_after(60):
            assert not await pool.wait_ready()  # the preparation failed
        assert refused.exists()
        result = await _result(service, provider.name, standin.workspace)
        assert (pool.stats.failed, pool.stats.cold, pool.stats.claimed) == (1, 1, 0)
    assert result.stop_reason == "completed", result.diagnostic
    assert result.text == "done"
    assert "preparing a ready product failed" in caplog.text


async def test_a_ready_cli_serves_its_delegation_with_the_callbacks_of_its_handshake(
    standin: Standin,
) -> None:
    ready = standin.provider(ASKS, provider_name="ready", warm=1)
    cold = standin.provider(ASKS, provider_name="cold")
    results: dict[str, SubagentResult] = {}
    initialize: dict[str, Any] = {}
    async with SubagentService() as service:
        service.register_provider(ready)
        service.register_provider(cold)
        results["cold"] = await _result(service, "cold", standin.workspace)
        initialize["cold"] = standin.recorded("initialize.json")
        pool = await _pool(service, "ready", standin.workspace)
        with anyio.fail_after(60):
            assert await pool.wait_ready()
        (child,) = pool.idle
        assert isinstance(child.state, Connected)  # initialize answered, no task yet
        initialize["ready"] = standin.recorded("initialize.json")
        results["ready"] = await _result(service, "ready", standin.workspace)
        assert pool.stats.claimed == 1
    # The permission request reached the claimed delegation's own facts: the same
    # failure and detail lines as the cold run's.
    assert results["ready"].diagnostic is not None
    assert "decision: denied" in results["ready"].diagnostic
    assert results["ready"].diagnostic == results["cold"].diagnostic
    assert results["ready"].stop_reason == results["cold"].stop_reason == "error"
    assert initialize["ready"] == initialize["cold"]


async def test_closing_with_a_ready_cli_idle_ends_it_without_an_sdk_error(
    standin: Standin, caplog: pytest.LogCaptureFixture
) -> None:
    provider = standin.provider(ANSWER, warm=1)
    async with SubagentService() as service:
        service.register_provider(provider)
        pool = await _pool(service, provider.name, standin.workspace)
        with anyio.fail_after(60):
            assert await pool.wait_ready()
        (child,) = pool.idle
    assert not child.process.tree_alive()
    # The SDK's reader stopped before the tree was ended: the CLI's exit on SIGTERM is no
    # "Fatal error in message reader" of a run.
    assert [r.getMessage() for r in caplog.records if r.name.startswith("claude_agent_sdk")] == []
