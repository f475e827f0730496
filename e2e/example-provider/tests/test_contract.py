"""The example provider runs the whole contract kit, exactly as a third party would."""

from __future__ import annotations

import pytest
from dsh_contract_tests import ChildSetup, ProviderContract, ProviderFactory
from dsh_example_provider import ExampleConfig, ExampleProvider


def make_provider(setup: ChildSetup) -> ExampleProvider:
    return ExampleProvider(ExampleConfig(env=dict(setup.env), cwd=setup.cwd_override))


class TestExampleProvider(ProviderContract):
    entry_point_name = "example"

    @pytest.fixture
    def provider_factory(self) -> ProviderFactory:
        return make_provider
