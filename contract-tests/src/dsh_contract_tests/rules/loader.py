"""Rules of the ``loader`` area: the provider loads from its entry point and starts nothing."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points
from typing import Any

from dsh_subagent import SubagentProvider

from dsh_contract_tests.failures import requirement
from dsh_contract_tests.harness import ContractHarness, ProviderTests

__all__ = ["test_entry_point_loads_without_starting"]


@requirement("loader:entry-point-starts-nothing")
def test_entry_point_loads_without_starting(self: ProviderTests, contract: ContractHarness) -> None:
    """The entry point resolves, the Config validates, construction starts nothing."""
    name = self.entry_point_name
    assert name, (
        "the test class sets no entry_point_name (the provider's name in the "
        "dsh.subagent.providers entry-point group)"
    )
    found = [e for e in entry_points(group="dsh.subagent.providers") if e.name == name]
    assert len(found) == 1, (
        f"{len(found)} entry points named {name!r} in the group dsh.subagent.providers "
        '(declare one in pyproject.toml, [project.entry-points."dsh.subagent.providers"], '
        f'as {name} = "your_module:YourProvider", and install the distribution)'
    )
    (entry,) = found
    contract.monkeypatch.setenv("PATH", "")
    loaded = entry.load()
    if not inspect.isclass(loaded) or SubagentProvider not in inspect.getmro(loaded):
        raise AssertionError(
            f"the entry point {name} = {entry.value!r} loads {loaded!r}, not a "
            "SubagentProvider subclass"
        )
    provider_cls: Any = loaded
    config_cls = getattr(provider_cls, "Config", None)
    assert config_cls is not None, f"{loaded.__name__} has no Config class attribute"
    assert config_cls.model_config.get("frozen") is True, f"{config_cls.__name__} is not frozen"
    assert config_cls.model_config.get("extra") == "forbid", (
        f"{config_cls.__name__} does not forbid unknown keys (extra='forbid')"
    )
    config = config_cls.model_validate(self.loader_config(contract.setup()))
    provider = provider_cls(config)
    assert provider.name == name, (
        f"the provider built from the entry point {name!r} is named {provider.name!r}"
    )
    assert contract.watch.ever_seen == 0, (
        f"loading and constructing the provider started processes: {contract.seen_processes()}"
    )
