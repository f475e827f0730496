"""Rules of the ``cwd`` area: where the child process works."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from dsh_subagent import SubagentError, SubagentErrorCode

from dsh_contract_tests.harness import ContractHarness
from dsh_contract_tests.manifest import requirement
from dsh_contract_tests.scenario import ChildSetup

if TYPE_CHECKING:
    from dsh_contract_tests.contract import ProviderContract

__all__ = [
    "test_child_runs_in_parent_session_cwd",
    "test_configured_cwd_override_wins",
    "test_missing_cwd_fails_loudly",
]


async def _root_cwds(contract: ContractHarness, setup: ChildSetup, cwd: Path) -> set[str]:
    """The working directories of the run's root processes, with the host cwd elsewhere."""
    decoy = contract.workspace("host-cwd-decoy")
    contract.monkeypatch.chdir(decoy)
    provider = contract.provider(setup)
    request, directive, _ = contract.request("hold", cwd=cwd)
    async with contract.service(provider) as svc:
        run = await svc.start(request)
        try:
            await contract.holding(setup, directive)
            roots = contract.watch.roots()
        finally:
            await contract.dispose(run)
    assert roots, "no child process of the run was observed"
    return {r.cwd for r in roots if r.cwd is not None}


@requirement("cwd:parent-session")
@pytest.mark.anyio
async def test_child_runs_in_parent_session_cwd(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """The child's working directory is the parent session's, not the host's."""
    workspace = contract.workspace()
    cwds = await _root_cwds(contract, contract.setup(), workspace)
    assert cwds == {str(await anyio.Path(workspace).resolve())}
    contract.assert_quiescent("after dispose")


@requirement("cwd:override-wins")
@pytest.mark.anyio
async def test_configured_cwd_override_wins(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """A configured override beats the parent cwd; without one the key is refused."""
    setup = contract.setup(cwd_override=str(contract.workspace("override")))
    provider_cls = type(contract.provider(contract.setup()))
    config_cls = getattr(provider_cls, "Config", None)
    assert config_cls is not None, "a provider plugin carries its pydantic Config class"
    if "cwd" not in config_cls.model_fields:
        # No override: the key must be refused at load, never accepted and ignored.
        with pytest.raises(ValueError, match="cwd"):
            config_cls.model_validate({**self.loader_config(setup), "cwd": "/"})
        return
    assert setup.cwd_override is not None
    cwds = await _root_cwds(contract, setup, contract.workspace())
    assert cwds == {str(await anyio.Path(setup.cwd_override).resolve())}
    contract.assert_quiescent("after dispose")


@requirement("cwd:missing-is-loud")
@pytest.mark.anyio
async def test_missing_cwd_fails_loudly(self: ProviderContract, contract: ContractHarness) -> None:
    """No override and no parent cwd: a loud failure, never the host cwd."""
    contract.monkeypatch.chdir(contract.workspace("host-cwd-decoy"))
    provider = contract.provider(contract.setup())
    request, _, _ = contract.request("complete", cwd=None)
    async with contract.service(provider) as svc:
        with pytest.raises(SubagentError) as caught:
            await svc.start(request)
        assert svc.events == []
    assert caught.value.code == SubagentErrorCode.NO_WORKING_DIRECTORY or (
        "no working directory" in caught.value.message
    )
    assert contract.watch.ever_seen == 0
    assert not contract.watch.alive()
