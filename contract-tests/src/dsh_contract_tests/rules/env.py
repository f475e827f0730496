"""Rules of the ``env`` area: what reaches the child's environment."""

from __future__ import annotations

import uuid

import pytest

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.processes import spawns
from dsh_contract_tests.scenario import ENV_READY_DIR, ChildSetup

__all__ = [
    "PLANTED_CREDENTIAL_NAME",
    "test_explicit_overlay_reaches_child",
    "test_parent_credential_does_not_reach_child",
]

PLANTED_CREDENTIAL_NAME = "CONTRACT_PLANTED_API_KEY"
"""Credential-shaped parent variable the env rule plants (must be scrubbed)."""


async def _root_envs(
    contract: ContractHarness, setup: ChildSetup
) -> tuple[list[tuple[str, dict[str, str]]], list[tuple[str, dict[str, str]]]]:
    """``(process, environment)`` of the run's root processes, and of every process of its
    tree, read while the run holds."""
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=contract.workspace())
    async with contract.service(provider) as svc:
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
            facts = contract.watch.facts()
            roots = contract.watch.roots()
        finally:
            await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    root_envs = [(f"{r.pid} ({r.name})", r.environ) for r in roots if r.environ is not None]
    assert root_envs, "the environment of the run's child process could not be read"
    return root_envs, [(f"{f.pid} ({f.name})", f.environ) for f in facts if f.environ is not None]


async def _plain_envs(contract: ContractHarness) -> list[tuple[str, dict[str, str]]]:
    """The environment of every process a ``hold`` run starts when the overlay holds
    nothing of the kit's (only the temporary homes), so that a provider cannot tell this
    run from one outside the kit by the kit's variables: each program as it was started
    (read from audit events, however briefly it lived) and each process of the run's
    tree once its child has started (the run is not waited on to signal a hold point)."""
    provider = contract.provider(contract.setup(kit_variables=False))
    request, _, _ = contract.request("hold", cwd=contract.workspace())
    with spawns() as started:
        async with contract.service(provider) as svc:
            run = await contract.start(svc, request)
            try:
                facts = await contract.tree_while_running(run)
            finally:
                await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    plain = " (a run without the kit's variables)"
    envs = [(f"{f.pid} ({f.name}){plain}", f.environ) for f in facts if f.environ is not None]
    return envs + [(f"{s.argv!r}{plain}", s.env) for s in started]


@requirement("env:credential-scrubbed")
@pytest.mark.anyio
async def test_parent_credential_does_not_reach_child(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A credential in the parent environment reaches no process of the run's tree, with
    the kit's overlay and without it (a run without it looks like any other)."""
    planted = "planted-" + uuid.uuid4().hex
    contract.monkeypatch.setenv(PLANTED_CREDENTIAL_NAME, planted)
    _, envs = await _root_envs(contract, contract.setup())
    envs += await _plain_envs(contract)
    for process, env in envs:
        assert PLANTED_CREDENTIAL_NAME not in env, (
            f"process {process} of the run's tree has the parent's {PLANTED_CREDENTIAL_NAME} "
            "in its environment"
        )
        leaked = sorted(name for name, value in env.items() if value == planted)
        assert not leaked, (
            f"process {process} of the run's tree carries the parent's planted credential "
            f"value under {', '.join(leaked)}"
        )


@requirement("env:overlay-reaches-child")
@pytest.mark.anyio
async def test_explicit_overlay_reaches_child(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """A credential layered explicitly through the provider's env reaches the child.

    The run's own child is the root process that carries this setup's ready directory
    (the directory it signals its hold point in): a stray process the provider starts
    besides it, e.g. a detached helper, is not the child and is not read here (leaving it
    behind is ``quiescence:after-dispose``'s).
    """
    setup = contract.setup()
    roots, _ = await _root_envs(contract, setup)
    own = [(p, env) for p, env in roots if env.get(ENV_READY_DIR) == str(setup.ready_dir)]
    if not own:
        listed = ", ".join(process for process, _ in roots)
        raise AssertionError(
            f"no process of the run's tree carries the configured env overlay: the run's root "
            f"process(es) {listed} have no {ENV_READY_DIR}={setup.ready_dir} in their "
            "environment (it was layered through the provider's env configuration)"
        )
    name = contract.overlay_credential_name
    for process, env in own:
        assert env.get(name) == setup.env[name], (
            f"the run's child process {process} "
            + (
                f"has no {name} in its environment"
                if name not in env
                else f"has another value of {name} than the configured one"
            )
            + " (it was layered through the provider's env configuration)"
        )
