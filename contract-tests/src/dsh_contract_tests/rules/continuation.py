"""Rules of the ``continuation`` area: follow-up delegations of a provider that declares
the ``continuation`` capability (opt-in; a provider without it only has to be honest).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from dsh_subagent import (
    COMPLETED,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    ContinuationHandle,
    SubagentError,
    SubagentErrorCode,
    SubagentProvider,
    SubagentResult,
)

from dsh_contract_tests.driver import ServiceDriver
from dsh_contract_tests.failures import kit_skip, requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = [
    "test_continuation_flag_is_honest",
    "test_continued_run_sees_the_earlier_turn",
    "test_foreign_or_stale_handle_is_refused",
]

_NOT_DECLARED = "the provider does not declare the 'continuation' capability (opt-in rule)"


async def _complete(
    contract: ContractHarness, svc: ServiceDriver, cwd: Path | None = None, **fields: Any
) -> tuple[SubagentResult, str]:
    """One ``complete`` run, disposed and checked quiescent; its result and token."""
    workspace = cwd if cwd is not None else contract.workspace()
    request, directive, _ = contract.request("complete", cwd=workspace, **fields)
    run = await contract.start(svc, request)
    try:
        result = await contract.result(run)
    finally:
        await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    return result, directive.token


def _handle_of(result: SubagentResult, provider: SubagentProvider) -> ContinuationHandle:
    assert result.stop_reason == COMPLETED, (
        f"a complete run settled {result.stop_reason!r}: {result.diagnostic!r}"
    )
    handle = result.continuation
    assert handle is not None, (
        "the provider declares the 'continuation' capability, yet a completed result carries "
        "no continuation handle"
    )
    assert handle.provider == provider.name, (
        f"the handle names provider {handle.provider!r}, not this instance {provider.name!r}"
    )
    assert ContinuationHandle.loads(handle.dumps()) == handle, "the handle does not round-trip"
    return handle


@requirement("continuation:flag-honest")
@pytest.mark.anyio
async def test_continuation_flag_is_honest(self: ProviderTests, contract: ContractHarness) -> None:
    """A completed result carries a handle exactly when the flag is declared."""
    setup = contract.setup()
    provider = contract.provider(setup)
    async with contract.service(provider) as svc:
        result, _ = await _complete(contract, svc)
    if provider.capabilities.continuation:
        _handle_of(result, provider)
    else:
        assert result.continuation is None, (
            "the provider does not declare the 'continuation' capability, yet its result "
            f"carries a continuation handle ({result.continuation!r})"
        )


@requirement("continuation:sees-earlier-turn")
@pytest.mark.anyio
async def test_continued_run_sees_the_earlier_turn(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """The follow-up's ``recall`` child answers the first run's token."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if not provider.capabilities.continuation:
        kit_skip(_NOT_DECLARED)
    async with contract.service(provider) as svc:
        # A follow-up continues in the same workspace (a product may key sessions by it).
        workspace = contract.workspace()
        first, token = await _complete(contract, svc, workspace)
        handle = _handle_of(first, provider)
        # The first run's whole tree is gone: _complete checked quiescence after dispose.
        request, _, _ = contract.request("recall", cwd=workspace, resume=handle)
        run = await contract.start(svc, request)
        try:
            second = await contract.result(run)
        finally:
            await contract.dispose(run)
        starts = [event for event in svc.events if event.kind == "start"]
    await contract.check_quiescent("after dispose")
    assert second.stop_reason == COMPLETED, (
        f"the continued run settled {second.stop_reason!r}: {second.diagnostic!r}"
    )
    assert second.text.strip() == token, (
        f"the continued run answered {second.text.strip()!r}, not the earlier turn's token "
        f"{token!r}: its product did not see the earlier turn"
    )
    assert len({event.run_id for event in starts}) == 2, "the follow-up was not a run of its own"


@requirement("continuation:refused")
@pytest.mark.anyio
async def test_foreign_or_stale_handle_is_refused(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """Another instance's handle and a session the product never had: the fixed refusal."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if not provider.capabilities.continuation:
        kit_skip(_NOT_DECLARED)
    async with contract.service(provider) as svc:
        first, _ = await _complete(contract, svc)
        handle = _handle_of(first, provider)
        foreign = handle.model_copy(update={"provider": f"{provider.name}-other"})
        stale = handle.model_copy(update={"session": str(uuid.uuid4())})
        for what, bad in (("another provider instance's", foreign), ("a stale", stale)):
            events = len(svc.events)
            calls = svc.spy.start_calls
            request, _, _ = contract.request("complete", cwd=contract.workspace(), resume=bad)
            try:
                run = await contract.start(svc, request)
            except SubagentError as exc:
                error: SubagentError = exc
            else:
                await contract.dispose(run)
                raise AssertionError(f"{what} handle started a run")
            assert error.code == SubagentErrorCode.CONTINUATION_UNAVAILABLE, (
                f"{what} handle was refused with {error.code}, not CONTINUATION_UNAVAILABLE"
            )
            assert error.message == CONTINUATION_UNAVAILABLE_MESSAGE, (
                f"{what} handle's refusal is not the fixed line: {error.message!r}"
            )
            assert len(svc.events) == events, f"{what} handle emitted lifecycle events"
            if bad is foreign:
                assert svc.spy.start_calls == calls, "start() ran for another instance's handle"
            await contract.check_quiescent(f"after {what} handle was refused")
