"""dsh-profiles: the Loader (TOML profile → entry-point providers → tools) and the
composition runtime, as a library under every command line (``dsh``, ``dsh-mcp``).

The names below are imported on first use (PEP 562), so a command that imports one
module of this package (the ``dsh`` command) can start handling Ctrl-C before the heavy
imports run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_profiles.discovery import (
        PROVIDER_GROUP,
        EntryPointDiscovery,
        ProviderCandidate,
        ProviderDiscovery,
        StaticDiscovery,
    )
    from dsh_profiles.errors import DshProfilesError, ProfileError, UsageError
    from dsh_profiles.loader import (
        JOB_TOOL_NAMES,
        Composition,
        LoadedProvider,
        compose,
        load_profile,
    )
    from dsh_profiles.profile import (
        JobsSection,
        Profile,
        ProviderRow,
        ToolRow,
        parse_profile,
        read_profile,
    )
    from dsh_profiles.runtime import Runtime, delegate, open_runtime, tool_schema
    from dsh_profiles.spawnguard import SpawnAttemptError, SpawnCounter
    from dsh_profiles.warm import Warm

__all__ = [
    "JOB_TOOL_NAMES",
    "PROVIDER_GROUP",
    "Composition",
    "DshProfilesError",
    "EntryPointDiscovery",
    "JobsSection",
    "LoadedProvider",
    "Profile",
    "ProfileError",
    "ProviderCandidate",
    "ProviderDiscovery",
    "ProviderRow",
    "Runtime",
    "SpawnAttemptError",
    "SpawnCounter",
    "StaticDiscovery",
    "ToolRow",
    "UsageError",
    "Warm",
    "compose",
    "delegate",
    "load_profile",
    "open_runtime",
    "parse_profile",
    "read_profile",
    "tool_schema",
]

_SOURCES = {
    "PROVIDER_GROUP": "dsh_profiles.discovery",
    "EntryPointDiscovery": "dsh_profiles.discovery",
    "ProviderCandidate": "dsh_profiles.discovery",
    "ProviderDiscovery": "dsh_profiles.discovery",
    "StaticDiscovery": "dsh_profiles.discovery",
    "DshProfilesError": "dsh_profiles.errors",
    "ProfileError": "dsh_profiles.errors",
    "UsageError": "dsh_profiles.errors",
    "JOB_TOOL_NAMES": "dsh_profiles.loader",
    "Composition": "dsh_profiles.loader",
    "LoadedProvider": "dsh_profiles.instance",
    "compose": "dsh_profiles.loader",
    "load_profile": "dsh_profiles.loader",
    "JobsSection": "dsh_profiles.profile",
    "Profile": "dsh_profiles.profile",
    "ProviderRow": "dsh_profiles.profile",
    "ToolRow": "dsh_profiles.profile",
    "parse_profile": "dsh_profiles.profile",
    "read_profile": "dsh_profiles.profile",
    "Runtime": "dsh_profiles.runtime",
    "delegate": "dsh_profiles.runtime",
    "open_runtime": "dsh_profiles.runtime",
    "tool_schema": "dsh_profiles.runtime",
    "SpawnAttemptError": "dsh_profiles.spawnguard",
    "SpawnCounter": "dsh_profiles.spawnguard",
    "Warm": "dsh_profiles.warm",
}


def __getattr__(name: str) -> object:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'dsh_profiles' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
