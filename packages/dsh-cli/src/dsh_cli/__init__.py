"""dsh-cli: the Loader (TOML profile → entry-point providers → tools) and the ``dsh`` command."""

from dsh_cli.discovery import (
    PROVIDER_GROUP,
    EntryPointDiscovery,
    ProviderCandidate,
    ProviderDiscovery,
    StaticDiscovery,
)
from dsh_cli.errors import DshCliError, ProfileError, UsageError
from dsh_cli.loader import JOB_TOOL_NAMES, Composition, LoadedProvider, compose, load_profile
from dsh_cli.profile import JobsSection, Profile, ProviderRow, ToolRow, parse_profile, read_profile
from dsh_cli.runtime import Runtime, delegate, open_runtime, tool_schema
from dsh_cli.spawnguard import SpawnAttemptError, SpawnCounter

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
    "compose",
    "delegate",
    "load_profile",
    "open_runtime",
    "parse_profile",
    "read_profile",
    "tool_schema",
]
