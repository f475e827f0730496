"""Rules of the ``output`` area: typed results (``output_schema``).

A provider declares the ``output_schema`` capability only when its product constrains the
answer itself; the host validates the answer whatever the provider did. The first rule
holds for every provider; the other three are skipped, with the reason shown, for a
provider that does not declare the flag. Runs use :data:`~dsh_contract_tests.scenario.OUTPUT_SCHEMA`
and the ``complete`` / ``misshapen`` directives.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dsh_subagent import (
    COMPLETED,
    ERROR,
    MAX_SUBAGENT_DIAGNOSTIC_BYTES,
    OUTPUT_INVALID,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
)

from dsh_contract_tests.driver import ServiceDriver
from dsh_contract_tests.failures import kit_skip, requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.scenario import OUTPUT_SCHEMA, Behaviour, structured_answer

__all__ = [
    "test_conforming_answer_yields_the_object",
    "test_nonconforming_answer_fails_with_the_fixed_category",
    "test_output_flag_is_honest",
    "test_output_schema_refused_before_start",
]

_NOT_DECLARED = "the provider does not declare the 'output_schema' capability (opt-in rule)"


async def _run(
    contract: ContractHarness, svc: ServiceDriver, behaviour: Behaviour, **fields: Any
) -> tuple[SubagentResult, str]:
    """One run, disposed and checked quiescent; its result and token."""
    request, directive, _ = contract.request(behaviour, cwd=contract.workspace(), **fields)
    run = await contract.start(svc, request)
    try:
        result = await contract.result(run)
    finally:
        await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    return result, directive.token


async def _refused(
    contract: ContractHarness, svc: ServiceDriver, schema: Any, code: SubagentErrorCode
) -> None:
    request, _, _ = contract.request("complete", cwd=contract.workspace(), output_schema=schema)
    try:
        run = await contract.start(svc, request)
    except SubagentError as exc:
        error: SubagentError = exc
    else:
        await contract.dispose(run)
        raise AssertionError(f"a request with output_schema={schema!r} started a run")
    assert error.code == code, f"the refusal's code is {error.code}, not {code}"
    assert "output_schema" in error.message, (
        f"the refusal does not name output_schema: {error.message!r}"
    )


@requirement("output:refused-before-start")
@pytest.mark.anyio
async def test_output_schema_refused_before_start(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """Nothing starts for a schema the provider cannot take, or that is not object-rooted."""
    setup = contract.setup()
    provider = contract.provider(setup)
    async with contract.service(provider) as svc:
        if provider.capabilities.output_schema:
            await _refused(contract, svc, {"type": "string"}, SubagentErrorCode.INVALID_REQUEST)
        else:
            await _refused(contract, svc, OUTPUT_SCHEMA, SubagentErrorCode.UNSUPPORTED_CAPABILITY)
        assert svc.spy.start_calls == 0, "provider.start() ran for a refused request"
        assert svc.events == [], f"a refused request emitted lifecycle events: {svc.events}"
    assert contract.watch.ever_seen == 0, (
        f"a refused request started processes: {contract.seen_processes()}"
    )


@requirement("output:flag-honest")
@pytest.mark.anyio
async def test_output_flag_is_honest(self: ProviderTests, contract: ContractHarness) -> None:
    """The schema reaches the product: only a run that carries it is answered in its form."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if not provider.capabilities.output_schema:
        kit_skip(_NOT_DECLARED)
    async with contract.service(provider) as svc:
        plain, plain_token = await _run(contract, svc, "complete")
        shaped, shaped_token = await _run(contract, svc, "complete", output_schema=OUTPUT_SCHEMA)
    assert plain.stop_reason == COMPLETED, (
        f"a run without a schema settled {plain.stop_reason!r}: {plain.diagnostic!r}"
    )
    assert plain.text == plain_token, "a run without a schema no longer answers as before"
    assert plain.structured is None, "a run without a schema carries a structured value"
    assert shaped.stop_reason == COMPLETED, (
        f"the product was handed the schema, yet the run settled {shaped.stop_reason!r}: "
        f"{shaped.diagnostic!r}"
    )
    assert json.loads(shaped.text) == structured_answer(shaped_token), (
        "the run with a schema was not answered in the schema's form: the product was not "
        "handed the schema"
    )


@requirement("output:conforming-yields-object")
@pytest.mark.anyio
async def test_conforming_answer_yields_the_object(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A conforming answer completes with the validated object and keeps its text."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if not provider.capabilities.output_schema:
        kit_skip(_NOT_DECLARED)
    async with contract.service(provider) as svc:
        result, token = await _run(contract, svc, "complete", output_schema=OUTPUT_SCHEMA)
    assert result.stop_reason == COMPLETED, (
        f"a conforming run settled {result.stop_reason!r}: {result.diagnostic!r}"
    )
    assert result.structured == structured_answer(token), (
        f"structured is {result.structured!r}, not the validated answer"
    )
    assert result.diagnostic is None, "a conforming run carries a diagnostic"
    assert result.text, "the answer's text is gone"


@requirement("output:nonconforming-fails")
@pytest.mark.anyio
async def test_nonconforming_answer_fails_with_the_fixed_category(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A non-conforming answer is ``error`` with ``output-invalid``, never a value."""
    setup = contract.setup()
    provider = contract.provider(setup)
    if not provider.capabilities.output_schema:
        kit_skip(_NOT_DECLARED)
    async with contract.service(provider) as svc:
        result, token = await _run(contract, svc, "misshapen", output_schema=OUTPUT_SCHEMA)
    assert result.stop_reason == ERROR, (
        f"a non-conforming answer settled {result.stop_reason!r}, not {ERROR!r}"
    )
    assert result.structured is None, "a failed run carries a structured value"
    diagnostic = result.diagnostic or ""
    assert f"category: {OUTPUT_INVALID}" in diagnostic, (
        f"the diagnostic does not name category {OUTPUT_INVALID}: {diagnostic!r}"
    )
    assert len(diagnostic.encode()) <= MAX_SUBAGENT_DIAGNOSTIC_BYTES, "unbounded diagnostic"
    assert token not in diagnostic, "the diagnostic repeats the task's token"
