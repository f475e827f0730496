"""Rules of the ``env`` area: what reaches the child's environment."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from dsh_contract_tests.harness import OVERLAY_CREDENTIAL_NAME, ContractHarness
from dsh_contract_tests.manifest import requirement
from dsh_contract_tests.scenario import ChildSetup

if TYPE_CHECKING:
    from dsh_contract_tests.contract import ProviderContract

__all__ = [
    "PLANTED_CREDENTIAL_NAME",
    "test_explicit_overlay_reaches_child",
    "test_parent_credential_does_not_reach_child",
]

PLANTED_CREDENTIAL_NAME = "CONTRACT_PLANTED_API_KEY"
"""Credential-shaped parent variable the env rule plants (must be scrubbed)."""


async def _root_envs(
    contract: ContractHarness, setup: ChildSetup
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The environments of the run's root processes, and of every process of its tree."""
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await svc.start(request)
        try:
            await contract.holding(setup, directive)
            facts = contract.watch.facts()
            roots = contract.watch.roots()
        finally:
            await contract.dispose(run)
    contract.assert_quiescent("after dispose")
    root_envs = [r.environ for r in roots if r.environ is not None]
    assert root_envs, "no readable environment of a child process of the run"
    return root_envs, [f.environ for f in facts if f.environ is not None]


@requirement("env:credential-scrubbed")
@pytest.mark.anyio
async def test_parent_credential_does_not_reach_child(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """A credential in the parent environment reaches no process of the run's tree."""
    planted = "planted-" + uuid.uuid4().hex
    contract.monkeypatch.setenv(PLANTED_CREDENTIAL_NAME, planted)
    _, envs = await _root_envs(contract, contract.setup())
    for env in envs:
        assert PLANTED_CREDENTIAL_NAME not in env
        assert planted not in env.values()


@requirement("env:overlay-reaches-child")
@pytest.mark.anyio
async def test_explicit_overlay_reaches_child(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """A credential layered explicitly through the provider's env reaches the child."""
    setup = contract.setup()
    roots, _ = await _root_envs(contract, setup)
    for env in roots:
        assert env.get(OVERLAY_CREDENTIAL_NAME) == setup.env[OVERLAY_CREDENTIAL_NAME]
