"""Cancellation at every phase and the two-stage shutdown down to whole-tree exit."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from acp_harness import (
    Scripted,
    make_request,
    pid_alive,
    started_run,
    wait_until_recorded,
)
from dsh_subagent import (
    CancelController,
    ProductStartError,
    ProductTeardownError,
    StartCancelledError,
    SubagentErrorCode,
)
from dsh_subprocess import DshSubprocessError, ExitFacts, ManagedProcess


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio

ABORTED = "subagent-acp: the request was cancelled before the run was published"


async def test_pre_aborted_request_spawns_nothing(tmp_path: Path) -> None:
    agent = Scripted(tmp_path)
    controller = CancelController()
    controller.cancel()
    async with anyio.create_task_group() as tg:
        with pytest.raises(StartCancelledError) as caught:
            await agent.provider().start(
                make_request(tg, cwd=str(agent.workspace), controller=controller)
            )
    assert caught.value.message == ABORTED
    assert caught.value.code == SubagentErrorCode.START_CANCELLED
    assert agent.records() == []


@pytest.mark.parametrize(
    ("stage_key", "method"), [("initialize", "initialize"), ("session_new", "session/new")]
)
async def test_cancel_during_startup_rolls_back(
    tmp_path: Path, stage_key: str, method: str
) -> None:
    agent = Scripted(tmp_path, {stage_key: {"do": "hang"}, "on_eof": "ignore", "grandchild": True})
    controller = CancelController()
    provider = agent.provider()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:

            async def cancel_when_waiting() -> None:
                await wait_until_recorded(agent, "frame", method)
                controller.cancel()

            tg.start_soon(cancel_when_waiting)
            with pytest.raises(StartCancelledError) as caught:
                await provider.start(
                    make_request(tg, cwd=str(agent.workspace), controller=controller)
                )
    assert caught.value.message == ABORTED
    started = agent.started()
    assert not pid_alive(started["pid"])
    assert not pid_alive(started["grandchild"])


async def test_caller_cancellation_of_start_rolls_back(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"session_new": {"do": "hang"}, "on_eof": "ignore"})
    provider = agent.provider()
    async with anyio.create_task_group() as tg:
        with anyio.move_on_after(20) as scope:

            async def cancel_when_waiting() -> None:
                await wait_until_recorded(agent, "frame", "session/new")
                scope.cancel()

            tg.start_soon(cancel_when_waiting)
            await provider.start(make_request(tg, cwd=str(agent.workspace)))
            pytest.fail("start() returned although its caller was cancelled")
    assert not pid_alive(agent.started()["pid"])


async def test_cancel_mid_prompt_sends_session_cancel_and_settles_aborted(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "partial"}, {"wait_cancel": True}]})
    controller = CancelController()
    with anyio.fail_after(20):
        async with started_run(
            agent.provider(), cwd=str(agent.workspace), controller=controller
        ) as run:
            await wait_until_recorded(agent, "frame", "session/prompt")
            controller.cancel()
            result = await run.result()
            await wait_until_recorded(agent, "cancel_seen")
    assert result.stop_reason == "aborted"
    assert result.text == "partial"
    assert result.diagnostic is None
    (cancel,) = agent.frames("incoming", "session/cancel")
    assert cancel["params"]["sessionId"].startswith("scripted-session-")


async def test_agent_ignoring_cancel_still_settles_aborted_and_is_reaped(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {
            "prompt": [{"chunk": "partial"}, {"wait_cancel": True, "then": "hang"}],
            "on_eof": "ignore",
            "trap_term": True,
            "grandchild": True,
        },
    )
    controller = CancelController()
    provider = agent.provider(dispose_eof_grace=0.3, dispose_grace=0.3)
    with anyio.fail_after(20):
        async with started_run(provider, cwd=str(agent.workspace), controller=controller) as run:
            await wait_until_recorded(agent, "frame", "session/prompt")
            controller.cancel()
            result = await run.result()
            # Settled locally: the agent still hangs in its turn, nothing was torn down.
            started = agent.started()
            assert pid_alive(started["pid"])
            assert agent.events("stdin_eof") == []
            await wait_until_recorded(agent, "cancel_seen")
    assert result.stop_reason == "aborted"
    assert not pid_alive(started["pid"])
    assert not pid_alive(started["grandchild"])


async def test_dispose_mid_prompt_cancels_first_then_shuts_down(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path, {"prompt": [{"chunk": "partial"}, {"wait_cancel": True, "then": "hang"}]}
    )
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            run = await agent.provider().start(make_request(tg, cwd=str(agent.workspace)))
            await wait_until_recorded(agent, "frame", "session/prompt")
            await run.dispose()
            result = await run.result()
    assert result.stop_reason == "aborted"
    assert result.text == "partial"
    events = [
        r["event"] if r["event"] != "frame" else r["message"].get("method") for r in agent.records()
    ]
    assert events.index("session/cancel") < events.index("stdin_eof")


async def test_dispose_after_completion_sends_no_cancel(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "done"}]})
    async with started_run(agent.provider(), cwd=str(agent.workspace)) as run:
        assert (await run.result()).stop_reason == "completed"
    assert agent.frames("incoming", "session/cancel") == []


async def test_eof_deaf_agent_with_setsid_grandchild_whole_tree_exits(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {"prompt": [{"chunk": "ok"}], "on_eof": "ignore", "grandchild": True, "record_term": True},
    )
    provider = agent.provider(dispose_eof_grace=0.5, dispose_grace=0.5)
    with anyio.fail_after(20):
        async with started_run(provider, cwd=str(agent.workspace)) as run:
            assert (await run.result()).text == "ok"
            started = agent.started()
            assert pid_alive(started["grandchild"])
            begun = time.monotonic()
            await run.dispose()
            took = time.monotonic() - begun
    # stdin closed first, then (the agent ignoring EOF) SIGTERM, which ends it.
    assert [r["event"] for r in agent.records() if r["event"] in ("stdin_eof", "sigterm")] == [
        "stdin_eof",
        "sigterm",
    ]
    assert not pid_alive(started["pid"])
    assert not pid_alive(started["grandchild"])
    assert took >= 0.5  # the EOF window was waited (a lower bound cannot flake on load)


async def test_term_trapping_agent_is_killed(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {"prompt": [{"chunk": "ok"}], "on_eof": "ignore", "trap_term": True, "record_term": True},
    )
    provider = agent.provider(dispose_eof_grace=0.3, dispose_grace=0.3)
    with anyio.fail_after(20):
        async with started_run(provider, cwd=str(agent.workspace)) as run:
            await run.result()
            begun = time.monotonic()
            await run.dispose()
            took = time.monotonic() - begun
    # SIGTERM arrived after stdin EOF and was ignored; only SIGKILL can have ended it.
    assert agent.events("stdin_eof")
    assert agent.events("sigterm")
    assert not pid_alive(agent.started()["pid"])
    assert took >= 0.6  # both graces were waited (a lower bound cannot flake on load)


async def test_dispose_is_memoised_and_concurrent_calls_share_it(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}], "on_eof": "ignore"})
    provider = agent.provider(dispose_eof_grace=0.3, dispose_grace=0.3)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, cwd=str(agent.workspace)))
            await run.result()
            async with anyio.create_task_group() as disposers:
                for _ in range(3):
                    disposers.start_soon(run.dispose)
            await run.dispose()
    assert len(agent.events("stdin_eof")) == 1
    assert not pid_alive(agent.started()["pid"])


def _break_terminate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every terminate() report failure after really tearing the tree down."""
    real = ManagedProcess.terminate

    async def broken(self: ManagedProcess) -> ExitFacts:
        await real(self)
        raise DshSubprocessError("planted teardown failure /secret/path")

    monkeypatch.setattr(ManagedProcess, "terminate", broken)


async def test_teardown_failure_is_the_safe_teardown_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    _break_terminate(monkeypatch)
    async with anyio.create_task_group() as tg:
        run = await agent.provider(dispose_eof_grace=5.0).start(
            make_request(tg, cwd=str(agent.workspace))
        )
        assert (await run.result()).stop_reason == "completed"
        with pytest.raises(ProductTeardownError) as caught:
            await run.dispose()
        with pytest.raises(ProductTeardownError) as again:
            await run.dispose()
    assert caught.value.message == (
        "subagent-acp: Product subagent failure "
        "(product: ACP; stage: teardown; category: unknown; exit code: 0)"
    )
    assert again.value is caught.value
    assert "secret" not in caught.value.message


async def test_failed_rollback_is_reported_with_the_startup_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Scripted(tmp_path, {"session_new": {"do": "exit", "code": 7}})
    _break_terminate(monkeypatch)
    async with anyio.create_task_group() as tg:
        with pytest.raises(ProductStartError) as caught:
            await agent.provider().start(make_request(tg, cwd=str(agent.workspace)))
    assert caught.value.rollback_failed is True
    assert caught.value.message == (
        "subagent-acp: Product subagent failure "
        "(product: ACP; stage: session-new; category: process-exit; exit code: 7); "
        "subagent-acp: Product subagent failure "
        "(product: ACP; stage: teardown; category: unknown; exit code: 7)"
    )
