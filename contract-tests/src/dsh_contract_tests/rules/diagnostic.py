"""Rules of the ``diagnostic`` area: what a failed run may say, and what it must not."""

from __future__ import annotations

import re

import anyio
import pytest
from dsh_subagent import ERROR, MAX_SUBAGENT_DIAGNOSTIC_BYTES, SubagentResult
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.scenario import PlantedSecrets

__all__ = [
    "PLANTED_VALUE_NAME",
    "test_diagnostic_is_bounded",
    "test_failure_diagnostic_is_the_fixed_line",
    "test_no_planted_secret_leaks",
]

PLANTED_VALUE_NAME = "CONTRACT_PLANTED_VALUE"
"""Plain parent variable carrying the secret rule's env value (may reach the child)."""

_PRODUCT_LINE = re.compile(
    r"Product subagent failure \(product: [^;()\n]+; stage: [^;()\n]+"
    r"(; category: [^;()\n]+)?(; HTTP status: \d+)?(; exit code: -?\d+)?(; signal: [A-Z0-9]+)?\)"
)

_SECRET_TAIL = st.text(
    alphabet=st.sampled_from(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_é中🙂"
    ),
    min_size=4,
    max_size=24,
)


async def _failed(contract: ContractHarness) -> SubagentResult:
    """The result of one ``fail`` run, disposed; a run that does not settle ``error`` ends
    the test as a consequence of ``settlement:result-never-raises``."""
    provider = contract.provider(contract.setup())
    request, _, _ = contract.request("fail", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            result = await contract.result(run)
        finally:
            await contract.dispose(run)
    if result.stop_reason != ERROR:
        await contract.consequence(
            "settlement:result-never-raises",
            f"a `fail` run settled {result.stop_reason}, not {ERROR}",
        )
    return result


@requirement("diagnostic:fixed-line")
@pytest.mark.anyio
async def test_failure_diagnostic_is_the_fixed_line(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """The diagnostic starts with the fixed product failure line, fields in order."""
    result = await _failed(contract)
    assert result.diagnostic is not None, "the failed run carries no diagnostic"
    first = result.diagnostic.split("\n", 1)[0]
    assert _PRODUCT_LINE.fullmatch(first), (
        f"the diagnostic's first line is not the fixed failure line: {first[:300]!r}"
    )
    await contract.check_quiescent("after dispose")


@requirement("diagnostic:bounded")
@pytest.mark.anyio
async def test_diagnostic_is_bounded(self: ProviderTests, contract: ContractHarness) -> None:
    """At most 4096 UTF-8 bytes, even when the raw product error is far longer."""
    result = await _failed(contract)
    assert result.diagnostic is not None, "the failed run carries no diagnostic"
    size = len(result.diagnostic.encode("utf-8"))
    assert size <= MAX_SUBAGENT_DIAGNOSTIC_BYTES, (
        f"the diagnostic is {size} UTF-8 bytes; the bound is {MAX_SUBAGENT_DIAGNOSTIC_BYTES}"
    )
    assert "\ufffd" not in result.diagnostic, (
        "the diagnostic holds U+FFFD: truncation split a UTF-8 sequence"
    )
    await contract.check_quiescent("after dispose")


@requirement("diagnostic:no-planted-secret")
def test_no_planted_secret_leaks(
    self: ProviderTests,
    contract: ContractHarness,
    anyio_backend: str,
    pytestconfig: pytest.Config,
) -> None:
    """Planted secrets never reach the diagnostic, the output or an event.

    ``--dsh-secret-examples N`` overrides the test class's ``secret_examples``.
    """
    examples = pytestconfig.getoption("--dsh-secret-examples") or self.secret_examples

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        # Each example starts a real child; shrinking a leak would cost minutes and the
        # first leaking example already names the channel.
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.tuples(*[_SECRET_TAIL] * 5))
    def check(tails: tuple[str, str, str, str, str]) -> None:
        planted = PlantedSecrets(*(f"S3CR3T{i}{t}" for i, t in enumerate(tails)))
        anyio.run(_one_secret_run, contract, planted, backend=anyio_backend)

    check()


async def _one_secret_run(contract: ContractHarness, planted: PlantedSecrets) -> None:
    """One ``fail`` run carrying ``planted`` in every channel; no channel may leak it."""
    setup = contract.setup(secrets=planted)
    workspace = contract.workspace() / planted.path
    workspace.mkdir()
    with contract.monkeypatch.context() as mp:
        mp.setenv(PLANTED_VALUE_NAME, planted.env_value)
        provider = contract.provider(setup)
        request, _, _ = contract.request("fail", cwd=workspace, task_text=planted.task)
        async with contract.service(provider) as svc:
            run = await contract.start(svc, request)
            try:
                result = await contract.result(run)
            finally:
                await contract.dispose(run)
    seen = {
        "diagnostic": result.diagnostic or "",
        "output": result.text,
        "lifecycle events": repr(svc.events),
    }
    for channel, secret in planted.all().items():
        for where, text in seen.items():
            if (at := text.find(secret)) >= 0:
                around = text[max(0, at - 120) : at + len(secret) + 120]
                raise AssertionError(
                    f"the planted {channel} {secret!r} appears in the {where}: ...{around!r}..."
                )
    await contract.check_quiescent("after dispose")
