"""The policy an instance's runs would get, for ``dsh check`` and the docs (starts nothing)."""

from __future__ import annotations

from dsh_subprocess import Confinement

from dsh_subagent.confinement import ConfinementSetting, run_policy
from dsh_subagent.product import ProductProvider
from dsh_subagent.types import SubagentProvider

__all__ = ["effective_policy", "makes_private_tmp"]


def effective_policy(
    provider: SubagentProvider, cwd: str
) -> tuple[ConfinementSetting, Confinement | None] | None:
    """The instance's setting and the policy a run in ``cwd`` would get; ``None`` for a
    provider that does not spawn through :class:`~dsh_subagent.ProductProvider` (its
    product is not confined by dsh). A wrapper exposing ``inner`` (worktree isolation)
    is looked through.

    Calls the provider's ``launch()`` (no I/O) and reads its product's configuration.
    """
    inner = getattr(provider, "inner", None)
    if isinstance(inner, SubagentProvider):
        provider = inner
    if not isinstance(provider, ProductProvider):
        return None
    setting: ConfinementSetting = provider.config.confinement
    launch = provider.launch(cwd)
    env = {**launch.env, **provider.config.env}
    reach = provider.confinement_reach(launch, env, cwd)
    return setting, run_policy(setting, reach, cwd=cwd, env=env)


def makes_private_tmp(provider: SubagentProvider) -> bool:
    """Whether each confined run of the instance gets a private ``TMPDIR`` made for it
    (its ``env`` names none)."""
    inner = getattr(provider, "inner", None)
    if isinstance(inner, SubagentProvider):
        provider = inner
    if not isinstance(provider, ProductProvider):
        return False
    config = provider.config
    return config.confinement.mode != "off" and not isinstance(config.env.get("TMPDIR"), str)
