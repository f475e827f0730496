"""A profile checked the way ``dsh check`` and ``dsh tools`` check it: loaded, registered and
bound under a forbidding spawn counter, so nothing can start (:func:`check_profile`).

What a check shows of an instance is here too: its configuration without credential
values (:func:`describe_config`) and its effective confinement policy
(:func:`dsh_profiles.confinement.policy_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio
from pydantic import BaseModel, JsonValue

from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.loader import Composition, load_profile
from dsh_profiles.runtime import open_runtime
from dsh_profiles.spawnguard import SpawnCounter

__all__ = ["ProfileCheck", "check_profile", "describe_config"]


@dataclass(frozen=True)
class ProfileCheck:
    """A profile composed and bound with nothing started.

    Attributes:
        composition: What the profile composes.
        schemas: The model-visible schema of every tool, in order.
        spawned: Product processes started while checking (always 0: a spawn raises).
    """

    composition: Composition
    schemas: list[dict[str, JsonValue]]
    spawned: int


async def _schemas(composition: Composition) -> list[dict[str, JsonValue]]:
    async with open_runtime(composition) as runtime:
        return runtime.schemas()


def check_profile(
    profile: str | Path, *, discovery: ProviderDiscovery | None = None
) -> ProfileCheck:
    """Load, register and bind ``profile`` under a forbidding spawn counter.

    It runs its own event loop: call it outside one.

    Raises:
        ProfileError: the profile is invalid (every problem, with its row and field).
        SpawnAttemptError: something tried to start a process while checking.
    """
    with SpawnCounter(forbid=True) as counter:
        composition = load_profile(profile, discovery=discovery)
        schemas = anyio.run(_schemas, composition)
    return ProfileCheck(composition, schemas, counter.count)


def describe_config(config: BaseModel) -> str:
    """An instance's configuration as ``key=value`` pairs, ``provider_name`` left out and
    ``env`` shown by its names only (its values may be credentials)."""
    data = config.model_dump(mode="json")
    parts = []
    for key, value in data.items():
        if key == "provider_name":
            continue
        if key == "env" and isinstance(value, dict):
            value = sorted(value)
        parts.append(f"{key}={value!r}")
    return " ".join(parts)
