"""Leaving JobRegistry: a body's exception reaches the caller as itself, jobs still cancelled."""

from __future__ import annotations

import logging

import anyio
import pytest
from dsh_subagent import ParentContext, ProductStartError
from dsh_tool_jobs import JobRegistry, JobStart
from dsh_tool_jobs.testing import ScriptedProducer

pytestmark = pytest.mark.anyio


def _spec(producer: ScriptedProducer) -> JobStart:
    owner = ParentContext(session_id="s1", cwd="/tmp")
    return JobStart(kind="bash", label="sleep", owner=owner, run=producer.run)


@pytest.mark.parametrize(
    "error",
    [ValueError("the caller's own bug"), ProductStartError("Product subagent failure (x)")],
    ids=["ValueError", "ProductStartError"],
)
async def test_a_body_exception_is_raised_unwrapped_and_jobs_are_cancelled(
    error: Exception,
) -> None:
    registry = JobRegistry()
    producer = ScriptedProducer()

    async def body() -> None:
        async with registry:
            registry.start(_spec(producer))
            raise error

    with pytest.raises(type(error)) as caught:
        await body()
    assert caught.value is error
    assert not hasattr(error, "__notes__")
    assert producer.cancels == ["jobs service disposed"]
    assert producer.done_returned


async def test_a_cancelled_body_still_leaves_quietly_and_cancels_jobs() -> None:
    producer = ScriptedProducer()
    with anyio.move_on_after(60) as scope:
        async with JobRegistry() as registry:
            registry.start(_spec(producer))
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert producer.cancels == ["jobs service disposed"]


async def test_a_registry_task_failing_at_exit_is_attached_to_the_body_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Deliberate: the body's exception is what the caller wrote `except` for; an error of
    # the registry's own tasks while it propagates is logged and attached as a note.
    # The registry contains its producers' faults, so the failing task is planted directly.
    registry = JobRegistry()

    async def fails_when_cancelled() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            raise RuntimeError("task failed at exit")

    async def body() -> None:
        async with registry:
            assert registry._task_group is not None
            registry._task_group.start_soon(fails_when_cancelled)
            await anyio.wait_all_tasks_blocked()
            raise ValueError("body")

    with (
        caplog.at_level(logging.ERROR, logger="dsh_tool_jobs"),
        pytest.raises(ValueError, match="body") as caught,
    ):
        await body()
    line = "jobs: registry exit failed: RuntimeError: task failed at exit"
    assert caught.value.__notes__ == [line]
    assert line in caplog.messages
