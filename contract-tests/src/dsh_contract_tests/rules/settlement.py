"""Rules of the ``settlement`` area: how a run ends, and how cancellation settles it.

The cancellation scenarios (:func:`cancel_during_start`, :func:`cancel_mid_run`,
:func:`cancel_after_completion`) are shared with the ``quiescence`` rules, which run the
same scenarios and then check that nothing of the tree survived.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    StartCancelledError,
    SubagentResult,
    SubagentRun,
)

from dsh_contract_tests.driver import ServiceDriver
from dsh_contract_tests.failures import KitTimeout, render_error, requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.scenario import Directive

__all__ = [
    "cancel_after_completion",
    "cancel_during_start",
    "cancel_mid_run",
    "test_cancel_after_completion",
    "test_cancel_before_start",
    "test_cancel_during_start",
    "test_cancel_mid_run",
    "test_completed_run_carries_answer_and_no_diagnostic",
    "test_failing_child_settles_as_a_result",
]


def _first_line(result: SubagentResult) -> str:
    return (result.diagnostic or "").split("\n", 1)[0]


def _described(result: SubagentResult) -> str:
    """``stop reason`` plus the diagnostic's first line, for a message."""
    line = _first_line(result)
    return f"{result.stop_reason} ({line})" if line else result.stop_reason


@requirement("settlement:completed")
@pytest.mark.anyio
async def test_completed_run_carries_answer_and_no_diagnostic(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A child that answers settles completed with exactly that answer."""
    provider = contract.provider(contract.setup())
    request, directive, _ = contract.request("complete", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            result = await contract.result(run)
        finally:
            await contract.dispose(run)
    assert result.stop_reason == COMPLETED, (
        f"a `complete` run settled {_described(result)}, not {COMPLETED}"
    )
    assert result.text.strip() == directive.token, (
        f"the answer is {result.text.strip()[:200]!r}, not exactly the token {directive.token!r}"
    )
    assert result.diagnostic is None, f"a completed run carries a diagnostic: {_first_line(result)}"
    await contract.check_quiescent("after dispose")


@requirement("settlement:result-never-raises")
@pytest.mark.anyio
async def test_failing_child_settles_as_a_result(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A published run's failure arrives as an ``error`` result, never an exception."""
    provider = contract.provider(contract.setup())
    request, _, _ = contract.request("fail", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            first = await contract.result(run)
            again = await contract.result(run)
        finally:
            await contract.dispose(run)
    assert first.stop_reason == ERROR, f"a `fail` run settled {_described(first)}, not {ERROR}"
    assert again == first, f"a second result() returned {again!r}, the first {first!r}"
    await contract.check_quiescent("after dispose")


@requirement("settlement:cancel-before-start")
@pytest.mark.anyio
async def test_cancel_before_start(self: ProviderTests, contract: ContractHarness) -> None:
    """An already-aborted request raises ``StartCancelledError``, publishes nothing and
    leaves nothing running."""
    provider = contract.provider(contract.setup())
    request, _, controller = contract.request("complete", cwd=contract.workspace())
    controller.cancel()
    async with contract.service(provider) as svc:
        try:
            run = await contract.start(svc, request)
        except StartCancelledError:
            pass
        else:
            await contract.dispose(run)
            raise AssertionError(
                "start() returned a run although the request's cancel signal was already "
                "aborted; it must raise StartCancelledError and start nothing"
            )
        assert svc.events == [], f"a start cancelled before it began emitted events: {svc.events}"
    await contract.check_quiescent("after a start cancelled before it began")


async def cancel_during_start(
    contract: ContractHarness,
) -> tuple[SubagentRun | None, SubagentResult | None, ServiceDriver, BaseException | None]:
    """Cancel a ``hold`` run while ``start()`` works; the run if publication won, else the
    error ``start()`` raised."""
    provider = contract.provider(contract.setup())
    request, _, controller = contract.request("hold", cwd=contract.workspace())
    box: dict[str, Any] = {}
    result: SubagentResult | None = None
    async with contract.service(provider) as svc:

        async def starter() -> None:
            try:
                box["run"] = await contract.start(svc, request)
            except Exception as exc:
                box["error"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(starter)
            with anyio.move_on_after(contract.settle_timeout) as waited:
                while not box and not contract.watch.alive():  # noqa: ASYNC110
                    await anyio.sleep(0.002)  # polling: processes cannot signal us
            if waited.cancelled_caught:
                raise KitTimeout(
                    f"waited {contract.settle_timeout:g} s for start() to start a process or "
                    "to return"
                )
            controller.cancel()
        run: SubagentRun | None = box.get("run")
        if run is not None:
            try:
                result = await contract.result(run)
            finally:
                await contract.dispose(run)
    return run, result, svc, box.get("error")


@requirement("settlement:cancel-during-start")
@pytest.mark.anyio
async def test_cancel_during_start(self: ProviderTests, contract: ContractHarness) -> None:
    """Cancelling while start() works: rollback without events, or ``aborted``."""
    run, result, svc, error = await cancel_during_start(contract)
    if run is None:
        if not isinstance(error, StartCancelledError):
            assert error is not None
            raise AssertionError(
                "a start cancelled before publication must raise StartCancelledError; it "
                f"raised {render_error(error)}"
            )
        assert svc.events == [], f"a rolled-back start emitted lifecycle events: {svc.events}"
    else:
        assert result is not None
        assert result.stop_reason == ABORTED, (
            f"a run published while its start was being cancelled settled {_described(result)}, "
            f"not {ABORTED}"
        )
        assert result.diagnostic is None, (
            f"a cancelled run carries a diagnostic: {_first_line(result)}"
        )
    await contract.check_quiescent("after a cancellation during start")


async def cancel_mid_run(contract: ContractHarness) -> SubagentResult:
    """Cancel a published ``hold`` run once it is working; its result."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, directive, controller = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
            controller.cancel()
            return await contract.result(run)
        finally:
            await contract.dispose(run)


@requirement("settlement:cancel-mid-run")
@pytest.mark.anyio
async def test_cancel_mid_run(self: ProviderTests, contract: ContractHarness) -> None:
    """Cancelling a working run settles ``aborted`` with no diagnostic."""
    result = await cancel_mid_run(contract)
    assert result.stop_reason == ABORTED, (
        f"a working run cancelled by its signal settled {_described(result)}, not {ABORTED}"
    )
    assert result.diagnostic is None, f"a cancelled run carries a diagnostic: {_first_line(result)}"
    await contract.check_quiescent("after a mid-run cancellation")


async def cancel_after_completion(
    contract: ContractHarness,
) -> tuple[SubagentResult, SubagentResult, Directive]:
    """Cancel a ``complete`` run after it settled; its result before and after."""
    provider = contract.provider(contract.setup())
    request, directive, controller = contract.request("complete", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            before = await contract.result(run)
            controller.cancel()
            after = await contract.result(run)
        finally:
            await contract.dispose(run)
    return before, after, directive


@requirement("settlement:cancel-after-completion")
@pytest.mark.anyio
async def test_cancel_after_completion(self: ProviderTests, contract: ContractHarness) -> None:
    """A late cancellation does not rewrite a settled result."""
    before, after, directive = await cancel_after_completion(contract)
    if before.stop_reason != COMPLETED or before.text.strip() != directive.token:
        await contract.consequence(
            "settlement:completed",
            f"the `complete` run settled {_described(before)} with "
            f"{before.text.strip()[:200]!r} before any cancellation",
        )
    assert after == before, (
        f"cancelling after completion changed the result from {_described(before)} to "
        f"{_described(after)}"
    )
    await contract.check_quiescent("after a cancellation after completion")
