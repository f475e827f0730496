"""SubprocessRunHandle: the published handle of an out-of-process child (seed 002)."""

from __future__ import annotations

import uuid

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    LocalCancellation,
    SubagentResult,
    SubagentRun,
    SubprocessRunHandle,
    TextBlock,
    settle_run_result,
)

pytestmark = pytest.mark.anyio


class Backend:
    """Records the dispose ladder; teardown can be gated or made to fail."""

    def __init__(self, *, fail: BaseException | None = None) -> None:
        self.steps: list[str] = []
        self.gate = anyio.Event()
        self.gated = False
        self.entered = anyio.Event()
        self.fail = fail

    def remove_listener(self) -> None:
        self.steps.append("remove")

    def request_cancel(self) -> None:
        self.steps.append("cancel")

    async def teardown(self) -> None:
        self.steps.append("teardown")
        self.entered.set()
        if self.gated:
            await self.gate.wait()
        await anyio.lowlevel.checkpoint()
        self.steps.append("teardown-done")
        if self.fail is not None:
            raise self.fail

    def handle(self, run_id: str | None = None) -> SubprocessRunHandle:
        return SubprocessRunHandle(
            request_cancel=self.request_cancel,
            teardown=self.teardown,
            remove_cancel_listener=self.remove_listener,
            run_id=run_id,
        )


async def test_shape_matches_the_run_protocol() -> None:
    handle = Backend().handle()
    assert isinstance(handle, SubagentRun)
    assert handle.local_agent is None
    assert uuid.UUID(handle.id).version == 4
    assert Backend().handle().id != handle.id
    assert Backend().handle(run_id="given").id == "given"


async def test_result_is_awaitable_many_times() -> None:
    handle = Backend().handle()
    value = SubagentResult(output=(TextBlock(text="hi"),), stop_reason=COMPLETED)
    async with anyio.create_task_group() as tg:
        got: list[SubagentResult] = []

        async def wait() -> None:
            got.append(await handle.result())

        tg.start_soon(wait)
        tg.start_soon(wait)
        await anyio.lowlevel.checkpoint()
        handle.set_result(value)
        handle.set_result(SubagentResult(stop_reason=ABORTED))  # ignored: first wins
    assert got == [value, value]
    assert await handle.result() is value


async def test_dispose_order_and_memoisation() -> None:
    backend = Backend()
    handle = backend.handle()
    await handle.dispose()
    await handle.dispose()
    assert backend.steps == ["remove", "cancel", "teardown", "teardown-done"]


async def test_concurrent_disposers_share_one_teardown() -> None:
    backend = Backend()
    backend.gated = True
    handle = backend.handle()
    finished: list[int] = []

    async def dispose(index: int) -> None:
        await handle.dispose()
        finished.append(index)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for index in range(3):
                tg.start_soon(dispose, index)
            await backend.entered.wait()
            await anyio.wait_all_tasks_blocked()
            assert finished == []  # nobody returns before the one teardown ends
            backend.gate.set()
    assert sorted(finished) == [0, 1, 2]
    assert backend.steps.count("teardown") == 1
    assert backend.steps.count("cancel") == 1


async def test_teardown_failure_is_reraised_to_every_caller() -> None:
    backend = Backend(fail=OSError("reap failed"))
    handle = backend.handle()
    for _ in range(2):
        with pytest.raises(OSError, match="reap failed"):
            await handle.dispose()
    assert backend.steps.count("teardown") == 1


async def test_teardown_survives_cancellation_of_the_first_disposer() -> None:
    backend = Backend()
    backend.gated = True
    handle = backend.handle()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            first = anyio.CancelScope()

            async def first_disposer() -> None:
                with first:
                    await handle.dispose()

            tg.start_soon(first_disposer)
            await backend.entered.wait()
            first.cancel()  # the shielded teardown keeps going
            await anyio.wait_all_tasks_blocked()
            assert "teardown-done" not in backend.steps

            later_done = anyio.Event()

            async def later() -> None:
                await handle.dispose()
                later_done.set()

            tg.start_soon(later)
            await anyio.wait_all_tasks_blocked()
            assert not later_done.is_set()
            backend.gate.set()
    assert backend.steps[-1] == "teardown-done"
    assert later_done.is_set()


async def test_dispose_still_tears_down_when_cancel_steps_raise() -> None:
    steps: list[str] = []

    def broken() -> None:
        raise RuntimeError("broken")

    async def teardown() -> None:
        steps.append("teardown")

    handle = SubprocessRunHandle(
        request_cancel=broken, teardown=teardown, remove_cancel_listener=broken
    )
    await handle.dispose()
    assert steps == ["teardown"]


async def test_drive_delivers_settlement_and_dispose_cancels_a_live_run() -> None:
    """The provider recipe end to end: publish, drive in a task group, dispose."""
    controller = CancelController()
    local = LocalCancellation()
    listener_calls: list[str] = []

    def on_abort(reason: str) -> None:
        listener_calls.append(reason)
        local.request_cancel(reason)

    remove = controller.signal.add_listener(on_abort)
    torn_down = anyio.Event()

    async def attempt() -> SubagentResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def teardown() -> None:
        torn_down.set()

    handle = SubprocessRunHandle(
        request_cancel=local.request_cancel, teardown=teardown, remove_cancel_listener=remove
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                handle.drive,
                lambda: settle_run_result(
                    attempt,
                    local=local,
                    collect_output=lambda: (TextBlock(text="so far"),),
                    remove_cancel_listener=remove,
                ),
            )
            await anyio.wait_all_tasks_blocked()
            await handle.dispose()
            result = await handle.result()
    assert result == SubagentResult(output=(TextBlock(text="so far"),), stop_reason=ABORTED)
    assert torn_down.is_set()
    controller.cancel()
    assert listener_calls == []  # dispose detached the listener before cancelling


async def test_driver_cancelled_before_settlement_makes_result_raise() -> None:
    handle = Backend().handle()

    async def never() -> SubagentResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(handle.drive, never)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    with pytest.raises(RuntimeError, match="driver ended before the run settled"):
        await handle.result()
