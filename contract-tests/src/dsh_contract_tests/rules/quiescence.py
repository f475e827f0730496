"""Rules of the ``quiescence`` area: no process of the run's tree outlives its disposal."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from dsh_subagent import ABORTED

from dsh_contract_tests.harness import ContractHarness
from dsh_contract_tests.manifest import requirement
from dsh_contract_tests.rules.settlement import (
    cancel_after_completion,
    cancel_during_start,
    cancel_mid_run,
)

if TYPE_CHECKING:
    from dsh_contract_tests.contract import ProviderContract

__all__ = [
    "test_cancel_at_any_phase_leaves_no_process",
    "test_concurrent_and_repeated_dispose",
    "test_dispose_leaves_no_process",
]


@requirement("quiescence:after-dispose")
@pytest.mark.anyio
async def test_dispose_leaves_no_process(self: ProviderContract, contract: ContractHarness) -> None:
    """When dispose() returns, the whole tree has exited."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await svc.start(request)
        try:
            await contract.holding(setup, directive)
            assert contract.watch.alive(), "a working run has no live process"
        finally:
            await contract.dispose(run)
        contract.assert_quiescent("when dispose() returned")


@requirement("quiescence:after-cancel-any-phase")
@pytest.mark.parametrize("phase", ["before-start", "during-start", "mid-run", "after-completion"])
@pytest.mark.anyio
async def test_cancel_at_any_phase_leaves_no_process(
    self: ProviderContract, contract: ContractHarness, phase: str
) -> None:
    """Cancellation at every phase, then dispose: nothing of the tree survives."""
    if phase == "before-start":
        provider = contract.provider(contract.setup())
        request, _, controller = contract.request("hold", cwd=contract.workspace())
        controller.cancel()
        async with contract.service(provider) as svc:
            with pytest.raises(Exception):  # noqa: B017, PT011 - any rollback error
                await svc.start(request)
    elif phase == "during-start":
        await cancel_during_start(contract)
    elif phase == "mid-run":
        await cancel_mid_run(contract)
    else:
        await cancel_after_completion(contract)
    contract.assert_quiescent(f"after cancellation {phase} and dispose")


@requirement("quiescence:dispose-idempotent")
@pytest.mark.anyio
async def test_concurrent_and_repeated_dispose(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """Concurrent disposes share one teardown; a later dispose is a no-op."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await svc.start(request)
        try:
            await contract.holding(setup, directive)
        finally:
            returned: list[bool] = []

            async def dispose_and_check() -> None:
                await contract.dispose(run)
                returned.append(not contract.watch.alive())

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(dispose_and_check)
        assert returned == [True, True, True], "a dispose returned before whole-tree exit"
        await contract.dispose(run)
        result = await contract.result(run)
    assert result.stop_reason == ABORTED
    contract.assert_quiescent("after repeated dispose")
