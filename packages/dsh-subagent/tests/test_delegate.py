"""The one-call form: one task, the result back, the run always disposed."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    Budget,
    CancelController,
    ProgressEvent,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    Usage,
    UsageUpdated,
    delegate,
    delegate_sync,
)
from dsh_subagent.testing import Script, ScriptedProvider
from subagent_echo import EchoConfig, EchoProvider, assert_gone

pytestmark = pytest.mark.anyio


async def test_delegate_to_a_provider_returns_the_answer_and_ends_the_tree(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    result = await delegate(provider, "answer in one call", cwd=tmp_path)
    assert (result.stop_reason, result.text) == (COMPLETED, "in one call")
    assert_gone(provider)


async def test_delegate_through_a_running_service_names_the_provider(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer("done")])
    async with SubagentService() as service:
        service.register_provider(provider)
        result = await delegate(service, "task", cwd=tmp_path, provider="p")
        with pytest.raises(SubagentError) as unnamed:
            await delegate(service, "task", cwd=tmp_path)
    assert result.text == "done"
    assert unnamed.value.code is SubagentErrorCode.INVALID_REQUEST
    assert provider.records[0].teardowns == 1
    assert provider.records[0].request.parent.cwd == str(tmp_path)


async def test_a_relative_cwd_resolves_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    provider = ScriptedProvider("p", [Script.answer("done")])
    await delegate(provider, "task", cwd=".")
    assert provider.records[0].request.parent.cwd == str(tmp_path)


async def test_the_cancel_signal_settles_aborted(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    cancel = CancelController()
    async with anyio.create_task_group() as group:

        async def stop_when_in_turn() -> None:
            await provider.in_turn.wait()
            cancel.cancel("enough")

        group.start_soon(stop_when_in_turn)
        result = await delegate(provider, "partial halfway", cwd=tmp_path, cancel=cancel.signal)
    assert (result.stop_reason, result.text) == (ABORTED, "halfway")
    assert_gone(provider)


async def test_cancelling_the_caller_disposes_the_run_before_propagating(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_when_in_turn() -> None:
                await provider.in_turn.wait()
                scope.cancel()

            group.start_soon(cancel_when_in_turn)
            await delegate(provider, "partial working", cwd=tmp_path)
    assert scope.cancelled_caught
    assert_gone(provider)


def test_delegate_sync_runs_its_own_loop(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    result = delegate_sync(provider, "answer blocking", cwd=tmp_path)
    assert (result.stop_reason, result.text) == (COMPLETED, "blocking")
    assert_gone(provider)


def test_delegate_sync_start_failures_raise_as_themselves(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    with pytest.raises(SubagentError) as caught:
        delegate_sync(provider, "answer x", cwd=tmp_path / "missing")
    assert caught.value.code is SubagentErrorCode.NO_WORKING_DIRECTORY
    assert sys.exc_info() == (None, None, None)


async def test_on_progress_hears_every_event_in_order_and_usage_reaches_the_result(
    tmp_path: Path,
) -> None:
    provider = EchoProvider(EchoConfig())
    heard: list[ProgressEvent] = []
    result = await delegate(provider, "usage 120 30", cwd=tmp_path, on_progress=heard.append)
    usage = Usage(input_tokens=120, output_tokens=30)
    assert heard == [UsageUpdated(usage=usage)]
    assert (result.stop_reason, result.usage) == (COMPLETED, usage)
    assert_gone(provider)


async def test_a_budget_tightens_the_configuration_for_this_call(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())  # unbounded as configured
    result = await delegate(
        provider, "partial forever", cwd=tmp_path, budget=Budget(idle_timeout_seconds=3.0)
    )
    assert (result.stop_reason, result.diagnostic) == (
        ERROR,
        "Product subagent failure (product: Echo; stage: turn; category: idle-timeout)",
    )
    assert_gone(provider)


async def test_a_provider_that_cannot_enforce_a_budget_refuses_it_before_starting(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider("p", [Script.answer("done")])
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "task", cwd=tmp_path, budget=Budget(deadline_seconds=5))
    assert caught.value.code is SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert provider.start_count == 0


async def test_progress_commands_reach_the_request(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer("done"), Script.answer("done")])
    await delegate(provider, "task", cwd=tmp_path)
    await delegate(provider, "task", cwd=tmp_path, progress_commands=True)
    assert [record.request.progress_commands for record in provider.records] == [False, True]


def test_delegate_sync_passes_the_budget_and_the_listener(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    heard: list[ProgressEvent] = []
    done = delegate_sync(provider, "usage 7 1", cwd=tmp_path, on_progress=heard.append)
    bounded = delegate_sync(
        provider, "partial forever", cwd=tmp_path, budget=Budget(deadline_seconds=3.0)
    )
    assert heard == [UsageUpdated(usage=Usage(input_tokens=7, output_tokens=1))]
    assert done.stop_reason == COMPLETED
    assert bounded.diagnostic is not None
    assert "category: deadline-exceeded" in bounded.diagnostic
