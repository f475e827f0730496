"""Rules of the ``capability`` area: a provider promises only what it can keep."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from dsh_subagent import (
    NO_START_CAPABILITIES,
    AgentOptions,
    ContinuationHandle,
    SubagentError,
    SubagentErrorCode,
    ToolFilter,
)

from dsh_contract_tests.failures import kit_skip, requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = [
    "test_out_of_process_declares_no_capability",
    "test_unsupported_capability_refused_before_start",
]

# One value per gated request field, each present (not merely truthy: max_depth=0 counts).
_GATED_FIELDS: dict[str, tuple[str, Any]] = {
    "agent_options": ("agent_options", AgentOptions(model="contract-model")),
    "output_schema": ("output_schema", {"type": "object"}),
    "depth_limit": ("max_depth", 0),
    "tool_filter": ("tool_filter", ToolFilter(allow=("read",))),
    "persona": ("persona", "contract persona"),
    "continuation": (
        "resume",
        ContinuationHandle(provider="contract", product="contract", session="contract-session"),
    ),
}


@requirement("capability:refused-before-start")
@pytest.mark.parametrize("flag", sorted(_GATED_FIELDS))
@pytest.mark.anyio
async def test_unsupported_capability_refused_before_start(
    self: ProviderTests, contract: ContractHarness, flag: str
) -> None:
    """A request needing an undeclared capability never reaches ``start()``."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if getattr(provider.capabilities, flag):
        kit_skip(f"the provider declares the {flag!r} capability")
    field_name, value = _GATED_FIELDS[flag]
    request, _, _ = contract.request("complete", cwd=contract.workspace(), **{field_name: value})
    async with contract.service(provider) as svc:
        try:
            run = await contract.start(svc, request)
        except SubagentError as exc:
            error: SubagentError = exc
        else:
            await contract.dispose(run)
            raise AssertionError(
                f"a request with {field_name} set started a run although the provider does not "
                f"declare {flag!r}"
            )
        assert error.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY, (
            f"the refusal's code is {error.code}, not UNSUPPORTED_CAPABILITY"
        )
        assert flag in error.message or field_name in error.message, (
            f"the refusal does not name {flag!r} or {field_name!r}: {error.message!r}"
        )
        assert svc.spy.start_calls == 0, "provider.start() ran for a refused request"
        assert svc.events == [], f"a refused request emitted lifecycle events: {svc.events}"
    assert contract.watch.ever_seen == 0, (
        f"a refused request started processes: {contract.seen_processes()}"
    )


@requirement("capability:out-of-process-declares-none")
@pytest.mark.anyio
async def test_out_of_process_declares_no_capability(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A provider whose runs live in another process promises nothing it cannot keep."""
    setup = contract.setup()
    provider = contract.provider(setup)
    request, _, _ = contract.request("complete", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            await contract.result(run)
        finally:
            await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    if run.local_agent is not None:
        kit_skip("in-process provider: its runs have a local agent")
    # continuation is the product's own saved session, and an output schema the product's
    # own answer constraint that the host validates too (output:flag-honest checks it):
    # neither is a parent-enforced feature.
    declared = dataclasses.replace(provider.capabilities, continuation=False, output_schema=False)
    assert declared == NO_START_CAPABILITIES, (
        f"the provider's runs have no local agent, yet it declares {provider.capabilities}; a "
        "child in another process cannot honour parent-enforced start features"
    )
    assert provider.inherits_parent_context is False, (
        "the provider's runs have no local agent, yet inherits_parent_context is True"
    )
