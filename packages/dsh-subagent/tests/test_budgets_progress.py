"""Run budgets (deadline, idle timeout), live progress and usage on the runtime.

The budget tests use bounds of a fraction of a second against a product that holds its
turn forever: they wait for the bound to fire (an event), never assert how fast.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    COMPLETED,
    ERROR,
    AssistantText,
    Budget,
    ProductStartError,
    ProgressStream,
    SubagentError,
    SubagentErrorCode,
    SubagentService,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent.budget import BudgetClock, EffectiveBudget
from dsh_subagent.testing import ScriptedProvider
from subagent_echo import EchoConfig, EchoProvider, assert_gone, request

pytestmark = pytest.mark.anyio


async def test_the_deadline_settles_error_with_the_stage_and_the_tree_gone_first(
    tmp_path: Path,
) -> None:
    # Long enough for the child's start-up on a loaded machine: the bound must fire mid-turn.
    provider = EchoProvider(EchoConfig(deadline_seconds=3.0))
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("echo", request("partial working forever", str(tmp_path)))
        result = await run.result()
        assert_gone(provider)  # before dispose: the result waited for the tree
        await run.dispose()
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: deadline-exceeded)"
    )
    assert result.text == "working forever"  # partial output kept


async def test_the_idle_timeout_fires_when_the_product_goes_silent(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig(idle_timeout_seconds=3.0))
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("echo", request("partial then silence", str(tmp_path)))
        result = await run.result()
        assert_gone(provider)
        await run.dispose()
    assert result.diagnostic == (
        "Product subagent failure (product: Echo; stage: turn; category: idle-timeout)"
    )


async def test_startup_counts_against_the_deadline(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig(child_mode="silent-open", deadline_seconds=0.3))
    async with SubagentService() as service:
        service.register_provider(provider)
        with pytest.raises(ProductStartError) as caught:
            await service.start("echo", request("answer x", str(tmp_path)))
    assert caught.value.message == (
        "subagent-echo: Product subagent failure (product: Echo; stage: initialize; "
        "category: deadline-exceeded)"
    )
    assert_gone(provider)


async def test_a_request_budget_tightens_an_unbounded_configuration(tmp_path: Path) -> None:
    provider = EchoProvider(EchoConfig())
    async with SubagentService() as service:
        service.register_provider(provider)
        req = request("partial forever", str(tmp_path)).model_copy(
            update={"budget": Budget(deadline_seconds=3.0)}
        )
        run = await service.start("echo", req)
        result = await run.result()
        await run.dispose()
    assert result.diagnostic is not None
    assert "category: deadline-exceeded" in result.diagnostic


def test_a_request_may_shorten_a_bound_never_extend_it() -> None:
    configured = (10.0, 5.0)
    assert EffectiveBudget.of(*configured, Budget(deadline_seconds=100.0)) == EffectiveBudget(
        10.0, 5.0
    )
    assert EffectiveBudget.of(*configured, Budget(idle_timeout_seconds=1.0)) == EffectiveBudget(
        10.0, 1.0
    )
    assert EffectiveBudget.of(None, None, Budget(deadline_seconds=2.0)) == EffectiveBudget(
        2.0, None
    )
    assert not EffectiveBudget.of(None, None, None).bounded


async def test_product_output_moves_the_idle_deadline_forward() -> None:
    clock = BudgetClock(EffectiveBudget(None, 5.0))
    scope = clock.scope()
    clock.activity()
    first = scope.deadline
    await anyio.sleep(0.01)
    clock.activity()
    assert scope.deadline > first


async def test_a_provider_that_does_not_honour_budgets_refuses_one(tmp_path: Path) -> None:
    provider = ScriptedProvider("p")
    async with SubagentService() as service:
        service.register_provider(provider)
        req = request("task", str(tmp_path)).model_copy(update={"budget": Budget()})
        with pytest.raises(SubagentError) as caught:
            await service.start("p", req)
    assert caught.value.code is SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert provider.start_count == 0


async def test_progress_streams_what_the_product_said_and_ends_at_settlement(
    tmp_path: Path,
) -> None:
    provider = EchoProvider(EchoConfig())
    events: list[object] = []
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("echo", request("usage 120 30", str(tmp_path)))
        async for event in run.progress:  # ends once the run settled
            events.append(event)
        result = await run.result()
        await run.dispose()
    usage = Usage(input_tokens=120, output_tokens=30)
    assert events == [UsageUpdated(usage=usage)]
    assert (result.stop_reason, result.usage) == (COMPLETED, usage)
    assert usage.total_tokens == 150


async def test_a_provider_without_progress_gives_an_empty_stream_that_ends(
    tmp_path: Path,
) -> None:
    async with SubagentService() as service:
        service.register_provider(ScriptedProvider("p"))
        run = await service.start("p", request("task", str(tmp_path)))
        assert [event async for event in run.progress] == []
        assert (await run.result()).usage is None
        await run.dispose()


async def test_the_stream_keeps_the_newest_events_and_counts_the_dropped() -> None:
    stream = ProgressStream(maxlen=2)
    for n in range(5):
        stream.emit(AssistantText(text=str(n), delta=True))
    stream.close()
    stream.emit(TurnStarted())  # after settlement: ignored
    assert [e.text async for e in stream if isinstance(e, AssistantText)] == ["3", "4"]
    assert stream.dropped == 3


async def test_listeners_are_called_and_a_raising_one_is_contained() -> None:
    stream = ProgressStream()
    seen: list[object] = []

    def broken(_event: object) -> None:
        raise RuntimeError("listener bug")

    stream.add_listener(broken)
    remove = stream.add_listener(seen.append)
    stream.emit(TurnStarted())
    remove()
    stream.emit(TurnStarted())
    assert seen == [TurnStarted()]
