"""settle_run_result never raises, and local cancellation wins (seeds 002, 004)."""

from __future__ import annotations

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    DIAGNOSTIC_TRUNCATED_SUFFIX,
    ERROR,
    MAX_TOKENS,
    CancelController,
    LocalCancellation,
    SubagentResult,
    TextBlock,
    settle_run_result,
)

pytestmark = pytest.mark.anyio

PARTIAL = (TextBlock(text="partial"),)


class Listener:
    """A cancel listener registered on a real signal, recording whether it fired."""

    def __init__(self, controller: CancelController, local: LocalCancellation) -> None:
        self.calls: list[str] = []
        self.local = local

        def on_abort(reason: str) -> None:
            self.calls.append(reason)
            local.request_cancel(reason)

        self.remove = controller.signal.add_listener(on_abort)


async def test_success_passes_through_and_removes_the_listener() -> None:
    controller = CancelController()
    local = LocalCancellation()
    listener = Listener(controller, local)
    expected = SubagentResult(output=(TextBlock(text="done"),), stop_reason=COMPLETED)

    async def attempt() -> SubagentResult:
        return expected

    result = await settle_run_result(
        attempt, local=local, collect_output=lambda: PARTIAL, remove_cancel_listener=listener.remove
    )
    assert result is expected
    controller.cancel()
    assert listener.calls == []  # detached in finally


async def test_success_with_own_diagnostic_is_kept_but_bounded() -> None:
    local = LocalCancellation()
    small = SubagentResult(diagnostic="ctx window", stop_reason=MAX_TOKENS)
    big = SubagentResult(diagnostic="x" * 5000, stop_reason=MAX_TOKENS)

    async def small_attempt() -> SubagentResult:
        return small

    async def big_attempt() -> SubagentResult:
        return big

    assert await settle_run_result(small_attempt, local=local) is small
    bounded = await settle_run_result(big_attempt, local=LocalCancellation())
    assert bounded.stop_reason == MAX_TOKENS
    assert bounded.diagnostic is not None
    assert bounded.diagnostic.endswith(DIAGNOSTIC_TRUNCATED_SUFFIX)
    assert len(bounded.diagnostic.encode()) <= 4096


async def test_cancellation_wins_over_a_later_success() -> None:
    local = LocalCancellation()

    async def attempt() -> SubagentResult:
        # Cancellation arrives while the attempt finishes without a checkpoint.
        local.request_cancel()
        return SubagentResult(
            output=(TextBlock(text="full answer"),),
            structured={"a": 1},
            diagnostic="should vanish",
            stop_reason=COMPLETED,
        )

    result = await settle_run_result(attempt, local=local, collect_output=lambda: PARTIAL)
    assert result == SubagentResult(output=PARTIAL, stop_reason=ABORTED)


async def test_cancellation_interrupts_a_hanging_attempt_through_the_signal() -> None:
    controller = CancelController()
    local = LocalCancellation()
    listener = Listener(controller, local)
    started = anyio.Event()
    diagnostic_calls: list[int] = []

    async def attempt() -> SubagentResult:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    def collect_diagnostic() -> str:
        diagnostic_calls.append(1)
        return "never shown"

    results: list[SubagentResult] = []

    async def settle() -> None:
        results.append(
            await settle_run_result(
                attempt,
                local=local,
                collect_output=lambda: PARTIAL,
                collect_diagnostic=collect_diagnostic,
                remove_cancel_listener=listener.remove,
            )
        )

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(settle)
            await started.wait()
            controller.cancel("superseded")
    assert results == [SubagentResult(output=PARTIAL, stop_reason=ABORTED)]
    assert listener.calls == ["superseded"]
    assert diagnostic_calls == []


async def test_cancel_requested_before_settlement_starts_aborts() -> None:
    local = LocalCancellation()
    local.request_cancel()
    ran: list[bool] = []

    async def attempt() -> SubagentResult:
        await anyio.lowlevel.checkpoint()
        ran.append(True)
        return SubagentResult(stop_reason=COMPLETED)

    result = await settle_run_result(attempt, local=local)
    assert result.stop_reason == ABORTED
    assert ran == []


async def test_rejection_already_queued_when_cancelled_is_aborted_without_diagnostic() -> None:
    local = LocalCancellation()

    async def attempt() -> SubagentResult:
        local.request_cancel()
        raise RuntimeError("transport gone")

    result = await settle_run_result(
        attempt, local=local, collect_output=lambda: PARTIAL, collect_diagnostic=lambda: "d"
    )
    assert result == SubagentResult(output=PARTIAL, stop_reason=ABORTED)


async def test_failure_is_flattened_to_error_with_bounded_diagnostic() -> None:
    local = LocalCancellation()
    seen: list[tuple[str, str]] = []
    boom = RuntimeError("boom")

    async def attempt() -> SubagentResult:
        raise boom

    def sink(error: Exception, reason: str) -> None:
        assert error is boom
        seen.append((reason, str(error)))

    result = await settle_run_result(
        attempt,
        local=local,
        collect_output=lambda: PARTIAL,
        collect_diagnostic=lambda: "é" * 3000,
        on_error=sink,
    )
    assert seen == [("error", "boom")]
    assert result.stop_reason == ERROR
    assert result.output == PARTIAL
    assert result.diagnostic is not None
    assert result.diagnostic.endswith(DIAGNOSTIC_TRUNCATED_SUFFIX)
    assert len(result.diagnostic.encode()) <= 4096
    assert "\ufffd" not in result.diagnostic


async def test_raising_sinks_and_collectors_cannot_make_it_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    local = LocalCancellation()

    async def attempt() -> SubagentResult:
        raise ValueError("bad frame")

    def sink(error: Exception, reason: str) -> None:
        raise RuntimeError("sink exploded")

    def broken_output() -> tuple[TextBlock, ...]:
        raise RuntimeError("output exploded")

    def broken_diagnostic() -> str:
        raise RuntimeError("diagnostic exploded")

    def broken_remove() -> None:
        raise RuntimeError("remove exploded")

    result = await settle_run_result(
        attempt,
        local=local,
        collect_output=broken_output,
        collect_diagnostic=broken_diagnostic,
        on_error=sink,
        remove_cancel_listener=broken_remove,
    )
    assert result == SubagentResult(stop_reason=ERROR)
    assert "sink raised" in caplog.text


async def test_failure_without_sink_or_diagnostic_still_settles_error() -> None:
    async def attempt() -> SubagentResult:
        raise OSError("pipe closed")

    result = await settle_run_result(attempt, local=LocalCancellation())
    assert result == SubagentResult(stop_reason=ERROR)


@pytest.mark.parametrize("cancel_first", [False, True])
async def test_listener_removed_on_the_error_and_abort_paths(cancel_first: bool) -> None:
    controller = CancelController()
    local = LocalCancellation()
    listener = Listener(controller, local)

    async def attempt() -> SubagentResult:
        if cancel_first:
            local.request_cancel()
        raise RuntimeError("x")

    result = await settle_run_result(attempt, local=local, remove_cancel_listener=listener.remove)
    assert result.stop_reason == (ABORTED if cancel_first else ERROR)
    controller.cancel()
    assert listener.calls == []


async def test_outer_cancellation_propagates_and_still_detaches() -> None:
    # Cancellation of the settling task itself is not a run outcome: it must propagate
    # (anyio's rules), and the listener is still removed.
    controller = CancelController()
    local = LocalCancellation()
    listener = Listener(controller, local)

    async def attempt() -> SubagentResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.move_on_after(0.05) as scope:
        await settle_run_result(attempt, local=local, remove_cancel_listener=listener.remove)
    assert scope.cancelled_caught
    controller.cancel()
    assert listener.calls == []
