"""dsh-example-provider: a tiny third-party subagent provider that passes the contract kit."""

from dsh_example_provider.config import ExampleConfig
from dsh_example_provider.provider import ExampleProvider

__all__ = ["ExampleConfig", "ExampleProvider"]
