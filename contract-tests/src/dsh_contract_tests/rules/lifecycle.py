"""Rules of the ``lifecycle`` area: the start and end events a published run emits."""

from __future__ import annotations

import pytest
from dsh_subagent import SubagentError, SubagentResult

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = ["test_every_call_returns_in_time", "test_lifecycle_events_are_paired"]


@requirement("lifecycle:paired")
@pytest.mark.anyio
async def test_lifecycle_events_are_paired(self: ProviderTests, contract: ContractHarness) -> None:
    """One start and one end per published run, same run id; none for a refusal."""
    provider = contract.provider(contract.setup())
    ok, _, _ = contract.request("complete", cwd=contract.workspace())
    bad, _, _ = contract.request("fail", cwd=contract.workspace())
    results: list[SubagentResult] = []
    async with contract.service(provider) as svc:
        for request in (ok, bad):
            run = await contract.start(svc, request)
            try:
                results.append(await contract.result(run))
            finally:
                await contract.dispose(run)
        refused = contract.request("complete", cwd=None)[0]
        try:
            run = await contract.start(svc, refused)
        except SubagentError:
            pass
        else:
            await contract.dispose(run)
            await contract.consequence(
                "cwd:missing-is-loud",
                "start() returned a run for a request with no parent cwd and no configured cwd",
            )
        events = list(svc.events)
    await contract.check_quiescent("after dispose")
    starts = [e for e in events if e.kind == "start"]
    ends = [e for e in events if e.kind == "end"]
    if (len(starts), len(ends)) != (2, 2):
        raise AssertionError(
            f"two published runs and one refused start emitted {len(starts)} subagent/start "
            f"and {len(ends)} subagent/end events: {events}"
        )
    assert len({e.run_id for e in starts}) == 2, f"two runs share one run id: {starts}"
    for start in starts:
        paired = [e for e in ends if e.run_id == start.run_id]
        assert len(paired) == 1, f"run {start.run_id} has {len(paired)} subagent/end events"
        (end,) = paired
        assert events.index(start) < events.index(end), (
            f"run {start.run_id}'s subagent/end came before its subagent/start"
        )
        assert (end.id, end.provider) == (start.id, start.provider), (
            f"run {start.run_id}'s start and end name different runs: {start} / {end}"
        )
    assert [e.stop_reason for e in ends] == [r.stop_reason for r in results], (
        f"the end events' stop reasons {[e.stop_reason for e in ends]} are not the results' "
        f"{[r.stop_reason for r in results]}"
    )


@requirement("lifecycle:calls-return")
@pytest.mark.anyio
async def test_every_call_returns_in_time(self: ProviderTests, contract: ContractHarness) -> None:
    """start(), dispose() and result() of a working run, then of a completing and a
    failing run, and the service's exit, each return within the settle timeout.

    Every wait is bounded (:meth:`ContractHarness.start` and its siblings) and watched
    (:mod:`dsh_contract_tests.watchdog`): one that ignores cancellation is abandoned. The
    working run comes first, so a dispose() that never returns is reported with the
    processes it left running.
    """
    setup = contract.setup()
    provider = contract.provider(setup)
    results: list[SubagentResult] = []
    async with contract.service(provider) as svc:
        request, directive, _ = contract.request("hold", cwd=contract.workspace())
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
        finally:
            await contract.dispose(run)
        results.append(await contract.result(run))
        for behaviour in ("complete", "fail"):
            request, _, _ = contract.request(behaviour, cwd=contract.workspace())
            run = await contract.start(svc, request)
            try:
                results.append(await contract.result(run))
            finally:
                await contract.dispose(run)
    # What the calls returned is other rules' business; that each returned is this one's.
    assert len(results) == 3, results
    await contract.check_quiescent("after dispose")
