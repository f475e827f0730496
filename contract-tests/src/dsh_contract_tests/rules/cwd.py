"""Rules of the ``cwd`` area: where the child process works."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dsh_subagent import SubagentError, SubagentErrorCode

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests
from dsh_contract_tests.scenario import ChildSetup

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
        run = await contract.start(svc, request)
        try:
            await contract.holding(setup, directive, run)
            roots = contract.watch.roots()
        finally:
            await contract.dispose(run)
    await contract.check_quiescent("after dispose")
    assert roots, "no child process of the run was observed while it was holding"
    cwds = {r.cwd for r in roots if r.cwd is not None}
    assert cwds, "the working directory of the run's child process could not be read"
    if str(await anyio.Path(decoy).resolve()) in cwds:
        raise AssertionError(
            f"the child process runs in the host process cwd {decoy}, not the cwd it was given"
        )
    return cwds


@requirement("cwd:parent-session")
@pytest.mark.anyio
async def test_child_runs_in_parent_session_cwd(
    self: ProviderTests, contract: ContractHarness
) -> None:
    """The child's working directory is the parent session's, not the host's."""
    workspace = contract.workspace()
    cwds = await _root_cwds(contract, contract.setup(), workspace)
    expected = str(await anyio.Path(workspace).resolve())
    assert cwds == {expected}, (
        f"the child process runs in {sorted(cwds)}, not in the parent session cwd {expected}"
    )


@requirement("cwd:override-wins")
@pytest.mark.anyio
async def test_configured_cwd_override_wins(self: ProviderTests, contract: ContractHarness) -> None:
    """A configured override beats the parent cwd; without one the key is refused."""
    setup = contract.setup(cwd_override=str(contract.workspace("override")))
    provider_cls = type(contract.provider(contract.setup()))
    config_cls = getattr(provider_cls, "Config", None)
    assert config_cls is not None, (
        f"{provider_cls.__name__} has no Config class attribute (its pydantic configuration)"
    )
    if "cwd" not in config_cls.model_fields:
        # No override: the key must be refused at load, never accepted and ignored.
        try:
            config_cls.model_validate({**self.loader_config(setup), "cwd": "/"})
        except ValueError as exc:
            if "cwd" not in str(exc):
                raise AssertionError(
                    f"the refusal of the cwd key does not name it: {exc}"
                ) from None
            return
        raise AssertionError(
            f"{config_cls.__name__} has no cwd field, yet accepts a cwd key instead of refusing it"
        )
    assert setup.cwd_override is not None
    cwds = await _root_cwds(contract, setup, contract.workspace())
    expected = str(await anyio.Path(setup.cwd_override).resolve())
    assert cwds == {expected}, (
        f"the child process runs in {sorted(cwds)}, not in the configured cwd {expected} "
        "(the parent session cwd was another directory)"
    )


@requirement("cwd:missing-is-loud")
@pytest.mark.anyio
async def test_missing_cwd_fails_loudly(self: ProviderTests, contract: ContractHarness) -> None:
    """No override and no parent cwd: a loud failure, never the host cwd."""
    contract.monkeypatch.chdir(contract.workspace("host-cwd-decoy"))
    provider = contract.provider(contract.setup())
    request, _, _ = contract.request("complete", cwd=None)
    async with contract.service(provider) as svc:
        try:
            run = await contract.start(svc, request)
        except SubagentError as exc:
            error: SubagentError = exc
        else:
            await contract.dispose(run)
            raise AssertionError(
                "start() returned a run for a request with no parent cwd and no configured cwd"
            )
        assert svc.events == [], f"the refused start emitted lifecycle events: {svc.events}"
    assert error.code == SubagentErrorCode.NO_WORKING_DIRECTORY or (
        "no working directory" in error.message
    ), f"start() raised {error.code}: {error.message!r}, not NO_WORKING_DIRECTORY"
    assert contract.watch.ever_seen == 0, (
        f"processes were started before the refusal: {contract.seen_processes()}"
    )
