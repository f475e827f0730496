"""Leaving SubagentService: a body's exception reaches the caller as itself, runs disposed."""

from __future__ import annotations

import logging
from dataclasses import replace

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    ParentContext,
    ProductStartError,
    ResolvedSubagentStartRequest,
    SubagentEvent,
    SubagentRunEnded,
    SubagentService,
    SubagentStartRequest,
    SubprocessRunHandle,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider

pytestmark = pytest.mark.anyio


def _request() -> SubagentStartRequest:
    return SubagentStartRequest(
        prompt=(TextBlock(text="task"),), parent=ParentContext(session_id="parent-1")
    )


def _held(dispose_error: Exception | None = None) -> Script:
    return replace(Script.answer("x"), hold_result=anyio.Event(), dispose_error=dispose_error)


async def _start_then_raise(
    provider: ScriptedProvider,
    error: BaseException | None,
    events: list[SubagentEvent] | None = None,
) -> None:
    """Enter a service, start one held run, then raise ``error`` from the body."""
    async with SubagentService() as service:
        service.register_provider(provider)
        if events is not None:
            service.add_listener(events.append)
        await service.start("p", _request())
        await provider.wait_attempts()
        if error is not None:
            raise error


async def test_a_body_value_error_is_raised_unwrapped_and_live_runs_are_disposed() -> None:
    provider = ScriptedProvider("p", [_held()])
    events: list[SubagentEvent] = []
    error = ValueError("the caller's own bug")
    with pytest.raises(ValueError, match="the caller's own bug") as caught:
        await _start_then_raise(provider, error, events)
    assert caught.value is error
    assert not hasattr(error, "__notes__")
    assert provider.records[0].teardowns == 1
    assert [e.stop_reason for e in events if isinstance(e, SubagentRunEnded)] == [ABORTED]


async def test_a_product_start_error_in_the_body_is_raised_as_itself() -> None:
    line = "Product subagent failure (product: P; stage: initialize; category: spawn-failed)"
    provider = ScriptedProvider("p", [Script(start_error=ProductStartError(line))])

    async def start_in_body() -> None:
        async with SubagentService() as service:
            service.register_provider(provider)
            await service.start("p", _request())

    with pytest.raises(ProductStartError) as caught:
        await start_in_body()
    assert type(caught.value) is ProductStartError
    assert caught.value.message == line


async def test_a_shutdown_failure_is_attached_to_the_body_exception_not_raised_over_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Deliberate: the body's exception is what the caller wrote `except` for; a dispose
    # failure while it propagates is logged and attached as a note instead of replacing it.
    provider = ScriptedProvider("p", [_held(dispose_error=OSError("reap"))])
    with (
        caplog.at_level(logging.ERROR, logger="dsh_subagent"),
        pytest.raises(ValueError, match="body") as caught,
    ):
        await _start_then_raise(provider, ValueError("body"))
    assert caught.value.__notes__ == ["subagent: service exit failed: OSError: reap"]
    assert "subagent: service exit failed: OSError: reap" in caplog.messages
    assert provider.records[0].teardowns == 1


async def test_without_a_body_exception_a_shutdown_failure_is_still_raised() -> None:
    provider = ScriptedProvider("p", [_held(dispose_error=OSError("reap"))])
    with pytest.raises(ExceptionGroup) as caught:
        await _start_then_raise(provider, None)
    assert caught.group_contains(OSError, match="reap")


async def test_a_cancelled_body_still_leaves_quietly_and_disposes() -> None:
    provider = ScriptedProvider("p", [_held()])
    with anyio.move_on_after(60) as scope:
        async with SubagentService() as service:
            service.register_provider(provider)
            await service.start("p", _request())
            await provider.wait_attempts()
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert provider.records[0].teardowns == 1


class _TaskFailsAtExit(ScriptedProvider):
    """Leaves a task in the service's group that raises when the service cancels it."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        async def fails_when_cancelled() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise RuntimeError("provider task failed at exit")

        run = await super().start(request)
        request.task_group.start_soon(fails_when_cancelled)
        return run


async def test_a_service_task_failing_at_exit_is_attached_to_the_body_exception() -> None:
    provider = _TaskFailsAtExit("p", [_held()])
    with pytest.raises(ValueError, match="body") as caught:
        await _start_then_raise(provider, ValueError("body"))
    assert caught.value.__notes__ == [
        "subagent: service exit failed: RuntimeError: provider task failed at exit"
    ]
    assert provider.records[0].teardowns == 1
