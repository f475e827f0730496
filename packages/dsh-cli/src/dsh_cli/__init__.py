"""dsh-cli: the Loader (TOML profile → entry-point providers → tools) and the ``dsh`` command.

The names below are imported on first use (PEP 562), so the ``dsh`` command can start
handling Ctrl-C before the heavy imports run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_cli.discovery import (
        PROVIDER_GROUP,
        EntryPointDiscovery,
        ProviderCandidate,
        ProviderDiscovery,
        StaticDiscovery,
    )
    from dsh_cli.errors import DshCliError, ProfileError, UsageError
    from dsh_cli.loader import JOB_TOOL_NAMES, Composition, LoadedProvider, compose, load_profile
    from dsh_cli.profile import (
        JobsSection,
        Profile,
        ProviderRow,
        ToolRow,
        parse_profile,
        read_profile,
    )
    from dsh_cli.runtime import Runtime, delegate, open_runtime, tool_schema
    from dsh_cli.spawnguard import SpawnAttemptError, SpawnCounter
    from dsh_cli.warm import Warm

__all__ = [
    "JOB_TOOL_NAMES",
    "PROVIDER_GROUP",
    "Composition",
    "DshCliError",
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
    "PROVIDER_GROUP": "dsh_cli.discovery",
    "EntryPointDiscovery": "dsh_cli.discovery",
    "ProviderCandidate": "dsh_cli.discovery",
    "ProviderDiscovery": "dsh_cli.discovery",
    "StaticDiscovery": "dsh_cli.discovery",
    "DshCliError": "dsh_cli.errors",
    "ProfileError": "dsh_cli.errors",
    "UsageError": "dsh_cli.errors",
    "JOB_TOOL_NAMES": "dsh_cli.loader",
    "Composition": "dsh_cli.loader",
    "LoadedProvider": "dsh_cli.loader",
    "compose": "dsh_cli.loader",
    "load_profile": "dsh_cli.loader",
    "JobsSection": "dsh_cli.profile",
    "Profile": "dsh_cli.profile",
    "ProviderRow": "dsh_cli.profile",
    "ToolRow": "dsh_cli.profile",
    "parse_profile": "dsh_cli.profile",
    "read_profile": "dsh_cli.profile",
    "Runtime": "dsh_cli.runtime",
    "delegate": "dsh_cli.runtime",
    "open_runtime": "dsh_cli.runtime",
    "tool_schema": "dsh_cli.runtime",
    "SpawnAttemptError": "dsh_cli.spawnguard",
    "SpawnCounter": "dsh_cli.spawnguard",
    "Warm": "dsh_cli.warm",
}


def __getattr__(name: str) -> object:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'dsh_cli' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
