"""Rules of the ``concurrency`` area: parallel runs of one provider instance."""

from __future__ import annotations

import anyio
import pytest
from dsh_subagent import ABORTED, COMPLETED, SubagentResult, SubagentStartRequest

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = ["test_parallel_runs_settle_independently"]


@requirement("concurrency:independent-runs")
@pytest.mark.anyio
async def test_parallel_runs_settle_independently(
    self: ProviderTests, contract: ContractHarness, pytestconfig: pytest.Config
) -> None:
    """Parallel runs on one instance: each gets its own answer; a cancel hits one."""
    setup = contract.setup()
    provider = contract.provider(setup)
    n = max(2, pytestconfig.getoption("--dsh-concurrency") or self.concurrency)
    held, held_directive, held_cancel = contract.request("hold", cwd=contract.workspace())
    others = [contract.request("complete", cwd=contract.workspace()) for _ in range(n - 1)]
    results: dict[str, SubagentResult] = {}
    async with contract.service(provider) as svc:

        async def one(request: SubagentStartRequest, token: str) -> None:
            run = await contract.start(svc, request)
            try:
                if token == held_directive.token:
                    await contract.holding(setup, held_directive, run)
                    held_cancel.cancel()
                results[token] = await contract.result(run)
            finally:
                await contract.dispose(run)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, held, held_directive.token)
            for request, directive, _ in others:
                tg.start_soon(one, request, directive.token)
    held_result = results[held_directive.token]
    assert held_result.stop_reason == ABORTED, (
        f"the cancelled one of {n} parallel runs settled {held_result.stop_reason}, not {ABORTED}"
    )
    for _, directive, _ in others:
        got = results[directive.token]
        if got.stop_reason != COMPLETED or got.text.strip() != directive.token:
            raise AssertionError(
                f"a parallel `complete` run settled {got.stop_reason} with "
                f"{got.text.strip()[:200]!r}, not {COMPLETED} with its token {directive.token!r}"
            )
    await contract.check_quiescent("after every parallel run was disposed")
