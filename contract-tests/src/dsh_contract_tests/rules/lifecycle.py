"""Rules of the ``lifecycle`` area: the start and end events a published run emits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from dsh_subagent import SubagentError, SubagentResult

from dsh_contract_tests.harness import ContractHarness
from dsh_contract_tests.manifest import requirement

if TYPE_CHECKING:
    from dsh_contract_tests.contract import ProviderContract

__all__ = ["test_lifecycle_events_are_paired"]


@requirement("lifecycle:paired")
@pytest.mark.anyio
async def test_lifecycle_events_are_paired(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """One start and one end per published run, same run id; none for a refusal."""
    provider = contract.provider(contract.setup())
    ok, _, _ = contract.request("complete", cwd=contract.workspace())
    bad, _, _ = contract.request("fail", cwd=contract.workspace())
    results: list[SubagentResult] = []
    async with contract.service(provider) as svc:
        for request in (ok, bad):
            run = await svc.start(request)
            try:
                results.append(await contract.result(run))
            finally:
                await contract.dispose(run)
        with pytest.raises(SubagentError):
            await svc.start(contract.request("complete", cwd=None)[0])
        events = list(svc.events)
    starts = [e for e in events if e.kind == "start"]
    ends = [e for e in events if e.kind == "end"]
    assert len(starts) == 2, events
    assert len(ends) == 2, events
    assert len({e.run_id for e in starts}) == 2
    for start in starts:
        (end,) = [e for e in ends if e.run_id == start.run_id]
        assert events.index(start) < events.index(end)
        assert (end.id, end.provider) == (start.id, start.provider)
    assert [e.stop_reason for e in ends] == [r.stop_reason for r in results]
