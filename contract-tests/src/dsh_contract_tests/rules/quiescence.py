"""Rules of the ``quiescence`` area: no process of the run's tree outlives its disposal."""

from __future__ import annotations

import anyio
import pytest
from dsh_subagent import ABORTED

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.rules.settlement import (
    cancel_after_completion,
    cancel_during_start,
    cancel_mid_run,
)

__all__ = [
    "test_cancel_at_any_phase_leaves_no_process",
    "test_concurrent_and_repeated_dispose",
    "test_dispose_leaves_no_process",
]


@requirement("quiescence:after-dispose")
@pytest.mark.anyio
async def test_dispose_leaves_no_process(self: ProviderTests, contract: ContractHarness) -> None:
    """When dispose() returns, the whole tree has exited."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
            assert contract.watch.alive(), "a run that is holding has no live process"
        finally:
            await contract.dispose(run)
        await contract.check_quiescent("when dispose() returned")


@requirement("quiescence:after-cancel-any-phase")
@pytest.mark.parametrize("phase", ["before-start", "during-start", "mid-run", "after-completion"])
@pytest.mark.anyio
async def test_cancel_at_any_phase_leaves_no_process(
    self: ProviderTests, contract: ContractHarness, phase: str
) -> None:
    """Cancellation at every phase, then dispose: nothing of the tree survives.

    Only what is left running is this rule's: how start() or the result reacts to the
    cancellation is checked by the ``settlement:cancel-*`` rules.
    """
    if phase == "before-start":
        provider = contract.provider(contract.setup())
        request, _, controller = contract.request("hold", cwd=contract.workspace())
        controller.cancel()
        async with contract.service(provider) as svc:
            try:
                run = await contract.start(svc, request)
            except Exception:
                pass  # what start() raised is judged by settlement:cancel-before-start
            else:
                await contract.dispose(run)
    elif phase == "during-start":
        await cancel_during_start(contract)
    elif phase == "mid-run":
        await cancel_mid_run(contract)
    else:
        await cancel_after_completion(contract)
    await contract.check_quiescent(f"after cancellation {phase} and dispose")


@requirement("quiescence:dispose-idempotent")
@pytest.mark.anyio
async def test_concurrent_and_repeated_dispose(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """Concurrent disposes share one teardown; a later dispose is a no-op."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
        finally:
            early: list[str] = []

            async def dispose_and_check() -> None:
                await contract.dispose(run)
                if alive := contract.watch.alive():
                    early.extend(str(seen) for seen in alive)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(dispose_and_check)
        if early:
            await contract.check_quiescent("when one of three concurrent dispose() calls returned")
        await contract.dispose(run)
        result = await contract.result(run)
    assert result.stop_reason == ABORTED, (
        f"a holding run disposed without cancellation settled {result.stop_reason}, not {ABORTED}"
    )
    await contract.check_quiescent("after repeated dispose")
