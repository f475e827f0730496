"""Keyless real-product tier for follow-up delegations: the pinned Codex app-server keeps
a thread in a persistent ``CODEX_HOME`` and a second, separate delegation resumes it.

Never skipped; temporary HOME/CODEX_HOME/TMPDIR; loopback only; the root conftest fails a
test that leaves any process behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from dsh_contract_tests.fixtures.responses import (
    Hold,
    PlainAnswer,
    ResponsesFixture,
    ResponseUsage,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    ERROR,
    Budget,
    CancelController,
    ContinuationHandle,
    ContinuationUnavailableError,
    SubagentResult,
    SubagentService,
    delegate,
)
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import host_descendants
from pydantic import ValidationError

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

FIRST_TASK = "Remember the word PELICAN-41c7. Reply FIRST-ANSWER-9d2e."
FIRST_ANSWER = "FIRST-ANSWER-9d2e"
FOLLOW_UP = "What word did I ask you to remember? FOLLOW-UP-MARKER-3a1b"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _setup(tmp_path: Path, fixture: ResponsesFixture) -> tuple[dict[str, str], Path]:
    env = codex_keyless_env(tmp_path / "keyless")
    write_codex_config(env["CODEX_HOME"], fixture.base_url)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return env, workspace


async def _delegate(service: SubagentService, task: str, cwd: Path, **kw: object) -> SubagentResult:
    with anyio.fail_after(90):
        return await delegate(service, task, cwd=cwd, provider="codex", **kw)  # type: ignore[arg-type]


def _rollouts(codex_home: str) -> list[Path]:
    return sorted(Path(codex_home).rglob("rollout-*.jsonl"))


async def test_a_follow_up_resumes_the_kept_thread_and_sees_the_earlier_turn(
    tmp_path: Path,
) -> None:
    with ResponsesFixture(
        [
            PlainAnswer(FIRST_ANSWER, phase="final_answer", usage=ResponseUsage(100, 7)),
            PlainAnswer("PELICAN-41c7", phase="final_answer", usage=ResponseUsage(140, 5)),
        ]
    ) as fixture:
        env, workspace = _setup(tmp_path, fixture)
        provider = CodexProvider(CodexConfig(env=env, continuation=True, dispose_grace=2.0))
        assert provider.capabilities.continuation is True
        async with SubagentService() as service:
            service.register_provider(provider)
            first = await _delegate(service, FIRST_TASK, workspace)
            assert (first.stop_reason, first.text) == (COMPLETED, FIRST_ANSWER)
            handle = first.continuation
            assert handle is not None
            assert (handle.provider, handle.product) == ("codex", "codex")
            # The first delegation's whole tree is gone before the second starts.
            assert host_descendants() == []
            assert _rollouts(env["CODEX_HOME"]), "the kept thread is on disk"
            token = handle.dumps()
            second = await _delegate(
                service, FOLLOW_UP, workspace, resume=ContinuationHandle.loads(token)
            )
        assert (second.stop_reason, second.text) == (COMPLETED, "PELICAN-41c7")
        assert second.continuation == handle
        follow_body = json.dumps(fixture.requests[-1].body)
        assert FIRST_TASK in follow_body
        assert FIRST_ANSWER in follow_body
        assert FOLLOW_UP in follow_body
        assert FOLLOW_UP not in json.dumps(fixture.requests[0].body)
        # Usage is this run's own, not the thread's running total.
        assert first.usage is not None
        assert second.usage is not None
        assert (first.usage.input_tokens, first.usage.output_tokens) == (100, 7)
        assert (second.usage.input_tokens, second.usage.output_tokens) == (140, 5)


async def test_without_continuation_threads_stay_ephemeral_and_nothing_is_kept(
    tmp_path: Path,
) -> None:
    with ResponsesFixture([PlainAnswer("ok", phase="final_answer")]) as fixture:
        env, workspace = _setup(tmp_path, fixture)
        provider = CodexProvider(CodexConfig(env=env, dispose_grace=2.0))
        async with SubagentService() as service:
            service.register_provider(provider)
            result = await _delegate(service, "say ok", workspace)
        assert result.continuation is None
        assert _rollouts(env["CODEX_HOME"]) == []


@pytest.mark.parametrize("why", ["unknown thread", "cleaned home"])
async def test_a_thread_the_home_no_longer_has_is_refused_with_the_fixed_line(
    tmp_path: Path, why: str
) -> None:
    with ResponsesFixture([PlainAnswer("one", phase="final_answer")]) as fixture:
        env, workspace = _setup(tmp_path, fixture)
        provider = CodexProvider(CodexConfig(env=env, continuation=True, dispose_grace=2.0))
        async with SubagentService() as service:
            service.register_provider(provider)
            if why == "cleaned home":
                first = await _delegate(service, "say one", workspace)
                handle = first.continuation
                assert handle is not None
                for rollout in _rollouts(env["CODEX_HOME"]):
                    rollout.unlink()
            else:
                handle = ContinuationHandle(
                    provider="codex",
                    product="codex",
                    session="019a0000-0000-7000-8000-000000000000",
                )
            requests = len(fixture.requests)
            with pytest.raises(ContinuationUnavailableError) as caught:
                await _delegate(service, "again", workspace, resume=handle)
        assert caught.value.message == CONTINUATION_UNAVAILABLE_MESSAGE
        assert len(fixture.requests) == requests  # no model request for a refused start
        assert host_descendants() == []  # the rolled-back app-server is gone


def test_continuation_needs_a_configured_absolute_codex_home() -> None:
    for env in ({}, {"CODEX_HOME": "relative/home"}):
        with pytest.raises(ValidationError, match="continuation") as caught:
            CodexConfig(env=env, continuation=True)
        assert "CODEX_HOME" in str(caught.value)
    assert CodexConfig(env={"CODEX_HOME": "/abs/home"}, continuation=True).continuation
    assert CodexProvider(CodexConfig()).capabilities.continuation is False


async def test_a_follow_up_is_cancelled_or_bounded_like_any_run_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    """Cancellation and budgets hold on a continued run: it settles aborted or with the
    deadline's line, and its whole tree is gone; the session can be continued again."""
    with ResponsesFixture(
        [
            PlainAnswer("one", phase="final_answer"),
            Hold(),
            Hold(),
            PlainAnswer("three", phase="final_answer"),
        ]
    ) as fixture:
        env, workspace = _setup(tmp_path, fixture)
        provider = CodexProvider(CodexConfig(env=env, continuation=True, dispose_grace=2.0))
        async with SubagentService() as service:
            service.register_provider(provider)
            first = await _delegate(service, "say one", workspace)
            assert first.continuation is not None
            controller = CancelController()

            async def cancel_when_held() -> None:
                while not fixture.holding:  # noqa: ASYNC110 - the fixture serves from a thread
                    await anyio.sleep(0.02)
                controller.cancel("enough")

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_when_held)
                cancelled = await _delegate(
                    service,
                    "hold",
                    workspace,
                    resume=first.continuation,
                    cancel=controller.signal,
                )
            assert cancelled.stop_reason == ABORTED
            assert cancelled.continuation is None  # an unfinished turn offers none
            assert host_descendants() == []
            bounded = await _delegate(
                service,
                "hold",
                workspace,
                resume=first.continuation,
                budget=Budget(deadline_seconds=3),
            )
            assert bounded.stop_reason == ERROR
            assert bounded.diagnostic is not None
            assert "deadline-exceeded" in bounded.diagnostic
            assert host_descendants() == []
            third = await _delegate(service, "say three", workspace, resume=first.continuation)
        assert (third.stop_reason, third.text) == (COMPLETED, "three")
