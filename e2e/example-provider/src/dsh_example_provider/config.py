"""Configuration of the example provider, validated once at load."""

from __future__ import annotations

from dsh_subagent import ProductConfig

__all__ = ["ExampleConfig"]


class ExampleConfig(ProductConfig):
    """One named instance of the example provider.

    The shared fields (``env`` overlay, ``cwd`` override, ``dispose_grace``) and their
    load-time checks come from :class:`dsh_subagent.ProductConfig`.

    Attributes:
        provider_name: Registry name of this instance.
    """

    provider_name: str = "example"
