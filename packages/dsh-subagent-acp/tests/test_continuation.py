"""Follow-up delegations over ACP: ``session/load`` of a kept session.

The real codex-acp (it advertises ``loadSession``) against the loopback Responses
fixture, isolated in a temporary HOME/CODEX_HOME/TMPDIR; the scripted agent (it does
not advertise it) for the refusal. The root conftest fails a test that leaves a
process behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_agent import codex_acp_or_skip
from acp_harness import Scripted
from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    ResponseUsage,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    COMPLETED,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    ContinuationHandle,
    ContinuationUnavailableError,
    ProductStartError,
    SubagentErrorCode,
    SubagentResult,
    SubagentService,
    delegate,
)
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subprocess.testing import host_descendants

pytestmark = pytest.mark.anyio

MODEL = "gpt-5.4-mini"  # a slug codex-acp knows (pitfall A1 in the README)
FIRST_TASK = "Remember the word OSPREY-2c9f. Reply FIRST-ANSWER-61aa."
FIRST_ANSWER = "FIRST-ANSWER-61aa"
FOLLOW_UP = "What word did I ask you to remember? FOLLOW-UP-MARKER-b7e3"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def codex_acp() -> str:
    return codex_acp_or_skip()


def _codex_acp(codex_acp: str, tmp_path: Path, fixture: ResponsesFixture) -> AcpProvider:
    env = codex_keyless_env(tmp_path / "root")
    write_codex_config(env["CODEX_HOME"], fixture.base_url, model=MODEL)
    env["RUST_LOG"] = "warn"
    return AcpProvider(
        AcpConfig(
            provider_name="codex-acp",
            command=codex_acp,
            args=("-c", "features.shell_snapshot=false"),
            env=env,
            dispose_eof_grace=0.2,
            dispose_grace=2.0,
            continuation=True,
        )
    )


async def _delegate(
    service: SubagentService, name: str, task: str, cwd: Path, **kw: Any
) -> SubagentResult:
    with anyio.fail_after(90):
        return await delegate(service, task, cwd=cwd, provider=name, **kw)


@pytest.mark.keyless
async def test_codex_acp_loads_the_session_and_the_follow_up_sees_the_earlier_turn(
    codex_acp: str, tmp_path: Path
) -> None:
    with ResponsesFixture(
        [
            PlainAnswer(FIRST_ANSWER, usage=ResponseUsage(100, 7)),
            PlainAnswer("OSPREY-2c9f", usage=ResponseUsage(140, 5)),
        ]
    ) as fixture:
        provider = _codex_acp(codex_acp, tmp_path, fixture)
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        async with SubagentService() as service:
            service.register_provider(provider)
            first = await _delegate(service, "codex-acp", FIRST_TASK, workspace)
            assert (first.stop_reason, first.text) == (COMPLETED, FIRST_ANSWER), first.diagnostic
            handle = first.continuation
            assert handle is not None
            assert (handle.provider, handle.product) == ("codex-acp", "acp")
            assert host_descendants() == []  # the first agent's whole tree exited
            second = await _delegate(service, "codex-acp", FOLLOW_UP, workspace, resume=handle)
        # The replayed history is not this run's answer.
        assert (second.stop_reason, second.text) == (COMPLETED, "OSPREY-2c9f"), second.diagnostic
        assert second.continuation == handle
        follow_body = json.dumps(fixture.requests[-1].body)
        assert FIRST_TASK in follow_body
        assert FIRST_ANSWER in follow_body
        assert FOLLOW_UP in follow_body
        # codex-acp 0.16.0 states no token counts (see test_keyless_codex_acp.py): nothing
        # from the earlier run is reported as this run's usage either.
        assert (first.usage, second.usage) == (None, None)

        stale = ContinuationHandle(
            provider="codex-acp", product="acp", session="019a0000-0000-7000-8000-000000000000"
        )
        requests = len(fixture.requests)
        async with SubagentService() as service:
            service.register_provider(provider)
            with pytest.raises(ContinuationUnavailableError) as caught:
                await _delegate(service, "codex-acp", "again", workspace, resume=stale)
        assert caught.value.message == CONTINUATION_UNAVAILABLE_MESSAGE
        assert len(fixture.requests) == requests
        assert host_descendants() == []


async def test_an_agent_without_load_session_issues_no_handle_and_refuses_a_follow_up(
    tmp_path: Path,
) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "done"}]})
    provider = agent.provider(continuation=True)
    assert provider.capabilities.continuation is True
    async with SubagentService() as service:
        service.register_provider(provider)
        result = await _delegate(service, "acp", "task", agent.workspace)
        assert result.text == "done"
        assert result.continuation is None  # the agent cannot load sessions: no handle
        handle = ContinuationHandle(provider="acp", product="acp", session="s-1")
        with pytest.raises(ProductStartError) as caught:
            await _delegate(service, "acp", "task", agent.workspace, resume=handle)
    assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert "continuation-unsupported" in caught.value.message
    assert agent.frames("in", "session/load") == []
    assert host_descendants() == []
