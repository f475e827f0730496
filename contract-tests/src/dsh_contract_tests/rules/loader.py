"""Rules of the ``loader`` area: the provider loads from its entry point and starts nothing."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from dsh_subagent import SubagentProvider

from dsh_contract_tests.harness import ContractHarness
from dsh_contract_tests.manifest import requirement

if TYPE_CHECKING:
    from dsh_contract_tests.contract import ProviderContract

__all__ = ["test_entry_point_loads_without_starting"]


@requirement("loader:entry-point-starts-nothing")
def test_entry_point_loads_without_starting(
    self: ProviderContract, contract: ContractHarness
) -> None:
    """The entry point resolves, the Config validates, construction starts nothing."""
    name = self.entry_point_name
    assert name, "set entry_point_name to the provider's dsh.subagent.providers name"
    (entry,) = [e for e in entry_points(group="dsh.subagent.providers") if e.name == name]
    contract.monkeypatch.setenv("PATH", "")
    loaded = entry.load()
    assert inspect.isclass(loaded)
    assert SubagentProvider in inspect.getmro(loaded)
    provider_cls: Any = loaded
    config_cls = provider_cls.Config
    assert config_cls.model_config.get("frozen") is True
    assert config_cls.model_config.get("extra") == "forbid"
    config = config_cls.model_validate(self.loader_config(contract.setup()))
    provider = provider_cls(config)
    assert provider.name == name
    assert contract.watch.ever_seen == 0, "loading the provider started a process"
    assert not contract.watch.alive(), "constructing the provider started a process"
