"""Rules of the ``ready`` area: ready products (``warm``), opt-in.

A provider offers ready starts when it is a :class:`~dsh_subagent.ProductProvider` whose
``offers_ready_starts`` is true; the kit then builds the instance under test again with
``warm`` set and drives it through a service of its own (the kit's spy wrapper would
hide the instance from the service's pool). A provider without ready starts has these
rules skipped, with the reason shown.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_subagent import (
    COMPLETED,
    ProductProvider,
    PublishedRun,
    ReadyPool,
    SubagentProvider,
    SubagentResult,
    SubagentService,
)

from dsh_contract_tests.driver import ServiceDriver, SpyProvider
from dsh_contract_tests.failures import kit_skip, requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = [
    "test_a_ready_delegation_is_indistinguishable_from_a_cold_one",
    "test_a_ready_product_dead_while_idle_never_fails_a_delegation",
    "test_a_ready_product_serves_one_delegation",
    "test_closing_the_service_leaves_no_ready_product",
]

_NOT_OFFERED = (
    "the provider offers no ready starts (opt-in rule: ProductProvider.offers_ready_starts)"
)


def _with_warm(
    provider: SubagentProvider, warm: int, name: str | None = None
) -> ProductProvider[Any]:
    if not isinstance(provider, ProductProvider) or not provider.offers_ready_starts:
        kit_skip(_NOT_OFFERED)
    update: dict[str, Any] = {"warm": warm}
    if name is not None:
        update["provider_name"] = name
    return type(provider)(provider.config.model_copy(update=update))


@asynccontextmanager
async def _service(*providers: ProductProvider[Any]) -> AsyncIterator[SubagentService]:
    async with SubagentService() as service:
        for provider in providers:
            service.register_provider(provider)
        yield service


async def _pool(
    contract: ContractHarness, service: SubagentService, name: str, cwd: Path
) -> ReadyPool:
    assert service.keep_ready(name, str(cwd)), "the service keeps nothing ready for the instance"
    pool = service.ready_pool(name)
    assert pool is not None
    ready = False
    with anyio.move_on_after(contract.bound()):
        ready = await pool.wait_ready()
    assert ready, f"no product got ready (stats: {pool.stats})"
    return pool


async def _complete(
    contract: ContractHarness, service: SubagentService, provider: ProductProvider[Any], cwd: Path
) -> tuple[SubagentResult, list[str]]:
    """One ``complete`` run on ``provider``, disposed; its result and its progress kinds."""
    svc = ServiceDriver(service, SpyProvider(provider))
    request, directive, _ = contract.request("complete", cwd=cwd)
    run = await contract.start(svc, request)
    assert isinstance(run, PublishedRun)  # the service's run carries the progress stream
    kinds: list[str] = []
    try:
        with anyio.move_on_after(contract.bound()):
            kinds = [event.kind async for event in run.progress]
        result = await contract.result(run)
    finally:
        await contract.dispose(run)
    assert result.stop_reason == COMPLETED, f"settled {result.stop_reason!r}: {result.diagnostic!r}"
    assert directive.token in result.text, "the answer is not this delegation's"
    return result, kinds


@requirement("ready:one-delegation-per-product")
@pytest.mark.anyio
async def test_a_ready_product_serves_one_delegation(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """Two delegations on a pool of one: each claims a different product, whose whole
    tree has ended once its run is disposed."""
    provider = _with_warm(contract.provider(contract.setup()), 1)
    workspace = contract.workspace()
    served: list[int] = []
    async with _service(provider) as service:
        pool = await _pool(contract, service, provider.name, workspace)
        for _ in range(2):
            with anyio.move_on_after(contract.bound()):
                await pool.wait_ready()
            assert len(pool.idle) == 1, f"no ready product before the delegation ({pool.stats})"
            child = pool.idle[0]
            served.append(child.process.pid)
            await _complete(contract, service, provider, workspace)
            assert not child.process.tree_alive(), (
                f"the ready product (pid {child.process.pid}) that served a delegation is still "
                "alive after its run was disposed"
            )
        assert pool.stats.claimed == 2, (
            f"the delegations did not run on ready products ({pool.stats})"
        )
    assert served[0] != served[1], f"two delegations were served by pid {served[0]}"
    await contract.check_quiescent("after the service's exit")


@requirement("ready:indistinguishable")
@pytest.mark.anyio
async def test_a_ready_delegation_is_indistinguishable_from_a_cold_one(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """The same request on a cold and on a ready instance: same stop reason, diagnostic,
    usage presence and progress kinds."""
    setup = contract.setup()
    base = contract.provider(setup)
    ready = _with_warm(base, 1)
    cold = _with_warm(base, 0, name=f"{base.name}-cold")
    workspace = contract.workspace()
    async with _service(ready, cold) as service:
        pool = await _pool(contract, service, ready.name, workspace)
        warm_result, warm_kinds = await _complete(contract, service, ready, workspace)
        cold_result, cold_kinds = await _complete(contract, service, cold, workspace)
        assert pool.stats.claimed == 1, (
            f"the delegation did not run on a ready product ({pool.stats})"
        )
    assert warm_result.diagnostic == cold_result.diagnostic
    assert (warm_result.usage is None) == (cold_result.usage is None)
    assert warm_kinds == cold_kinds, f"progress differs: ready {warm_kinds}, cold {cold_kinds}"
    await contract.check_quiescent("after the service's exit")


@requirement("ready:never-fails-a-delegation")
@pytest.mark.anyio
async def test_a_ready_product_dead_while_idle_never_fails_a_delegation(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """The ready product is killed while idle; the next delegation completes cold."""
    provider = _with_warm(contract.provider(contract.setup()), 1)
    workspace = contract.workspace()
    async with _service(provider) as service:
        pool = await _pool(contract, service, provider.name, workspace)
        victim = pool.idle[0].process
        os.kill(victim.pid, signal.SIGKILL)
        with anyio.move_on_after(contract.bound()):
            await victim.wait()
        await _complete(contract, service, provider, workspace)
        assert pool.stats.fallbacks == 1, f"the dead product was not counted ({pool.stats})"
    await contract.check_quiescent("after the service's exit")


@requirement("ready:close-leaves-nothing")
@pytest.mark.anyio
async def test_closing_the_service_leaves_no_ready_product(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """Two products ready, no delegation: the service's exit ends both trees."""
    provider = _with_warm(contract.provider(contract.setup()), 2)
    async with _service(provider) as service:
        pool = await _pool(contract, service, provider.name, contract.workspace())
        ready = [child.process for child in pool.idle]
    assert len(ready) == 2
    alive = [process.pid for process in ready if process.tree_alive()]
    assert not alive, f"ready products alive after the service's exit: {alive}"
    await contract.check_quiescent("after the service's exit")
