"""Keyless real-product tier for follow-up delegations: the bundled Claude Code CLI keeps
the session in its config directory and a second, separate delegation resumes it through
the SDK's own ``resume`` option.

Never skipped; temporary HOME/CLAUDE_CONFIG_DIR/TMPDIR; loopback only; the root conftest
fails a test that leaves any process behind.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import anyio
import pytest
from dsh_contract_tests.fixtures.messages import (
    KeylessClaudeHome,
    MessagesFixture,
    TextAnswer,
    TokenUsage,
    keyless_claude_home,
)
from dsh_subagent import (
    COMPLETED,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    ContinuationHandle,
    ContinuationUnavailableError,
    SubagentResult,
    SubagentService,
    delegate,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_claude_code.launch import session_file
from dsh_subprocess.testing import host_descendants

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

FIRST_TASK = "Remember the word HERON-5b21. Reply FIRST-ANSWER-77c0."
FIRST_ANSWER = "FIRST-ANSWER-77c0"
FOLLOW_UP = "What word did I ask you to remember? FOLLOW-UP-MARKER-e4d9"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _provider(home: KeylessClaudeHome, *, continuation: bool = True) -> ClaudeCodeProvider:
    return ClaudeCodeProvider(
        ClaudeCodeConfig(env=dict(home.env), continuation=continuation, provider_name="claude")
    )


async def _delegate(
    service: SubagentService, task: str, cwd: Path, resume: ContinuationHandle | None = None
) -> SubagentResult:
    with anyio.fail_after(90):
        return await delegate(service, task, cwd=cwd, provider="claude", resume=resume)


def _bodies(fixture: MessagesFixture) -> list[str]:
    return [json.dumps(r.body) for r in fixture.message_requests()]


async def test_a_follow_up_resumes_the_session_and_sees_the_earlier_turn(tmp_path: Path) -> None:
    with MessagesFixture(
        [
            TextAnswer(FIRST_ANSWER, usage=TokenUsage(input_tokens=100, output_tokens=7)),
            TextAnswer("HERON-5b21", usage=TokenUsage(input_tokens=140, output_tokens=5)),
        ]
    ) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        provider = _provider(home)
        assert provider.capabilities.continuation is True
        async with SubagentService() as service:
            service.register_provider(provider)
            first = await _delegate(service, FIRST_TASK, home.workspace)
            assert (first.stop_reason, first.text) == (COMPLETED, FIRST_ANSWER), first.diagnostic
            handle = first.continuation
            assert handle is not None
            assert (handle.provider, handle.product) == ("claude", "claude-code")
            assert session_file(home.env, str(home.workspace), handle.session).is_file()
            assert host_descendants() == []  # the first run's whole tree exited
            second = await _delegate(service, FOLLOW_UP, home.workspace, resume=handle)
        assert (second.stop_reason, second.text) == (COMPLETED, "HERON-5b21"), second.diagnostic
        assert second.continuation is not None
        bodies = _bodies(fixture)
        assert FIRST_TASK in bodies[-1]
        assert FIRST_ANSWER in bodies[-1]
        assert FOLLOW_UP in bodies[-1]
        assert all(FOLLOW_UP not in body for body in bodies[:-1])
        assert first.usage is not None
        assert second.usage is not None
        # This run's own tokens; the CLI states only the session's running cost.
        assert (second.usage.input_tokens, second.usage.output_tokens) == (140, 5)
        assert second.usage.cost_usd is None
        assert first.usage.cost_usd is not None


async def test_without_continuation_nothing_is_kept_and_no_handle_issued(tmp_path: Path) -> None:
    with MessagesFixture([TextAnswer("ok")]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        async with SubagentService() as service:
            service.register_provider(_provider(home, continuation=False))
            result = await _delegate(service, "say ok", home.workspace)
        assert result.stop_reason == COMPLETED
        assert result.continuation is None
        assert list(home.config_dir.rglob("*.jsonl")) == []


@pytest.mark.parametrize("why", ["unknown session", "cleaned home", "another workspace"])
async def test_a_session_claude_code_no_longer_has_is_refused_with_the_fixed_line(
    tmp_path: Path, why: str
) -> None:
    with MessagesFixture([TextAnswer("one")]) as fixture:
        home = keyless_claude_home(tmp_path, fixture.base_url)
        cwd = home.workspace
        async with SubagentService() as service:
            service.register_provider(_provider(home))
            handle = ContinuationHandle(
                provider="claude", product="claude-code", session=str(uuid.uuid4())
            )
            if why != "unknown session":
                first = await _delegate(service, "say one", home.workspace)
                assert first.continuation is not None
                handle = first.continuation
                if why == "cleaned home":
                    session_file(home.env, str(cwd), handle.session).unlink()
                else:
                    cwd = tmp_path / "elsewhere"
                    cwd.mkdir()
            requests = len(fixture.message_requests())
            with pytest.raises(ContinuationUnavailableError) as caught:
                await _delegate(service, "again", cwd, resume=handle)
        assert caught.value.message == CONTINUATION_UNAVAILABLE_MESSAGE
        assert len(fixture.message_requests()) == requests
        assert host_descendants() == []
