"""dsh-profiles: the Loader (TOML profile → entry-point providers → tools), the
composition runtime, and one task run as ``dsh run`` runs it (:func:`run_task`), as a
library under every command line (``dsh``, ``dsh-mcp``).

The names below are imported on first use (PEP 562), so a command that imports one
module of this package (the ``dsh`` command) can start handling Ctrl-C before the heavy
imports run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_profiles.check import ProfileCheck, check_profile
    from dsh_profiles.confinement import policy_lines
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
    from dsh_profiles.run import (
        EXIT_CODES,
        RunEvent,
        RunFailure,
        RunNotice,
        RunObserver,
        RunOutcome,
        RunPublished,
        RunSettled,
        RunStarting,
        exit_code_for,
        json_record,
        run_task,
    )
    from dsh_profiles.run_status import RunStatus
    from dsh_profiles.runtime import Runtime, delegate, open_runtime, tool_schema
    from dsh_profiles.spawnguard import SpawnAttemptError, SpawnCounter
    from dsh_profiles.warm import Warm

__all__ = [
    "EXIT_CODES",
    "JOB_TOOL_NAMES",
    "PROVIDER_GROUP",
    "Composition",
    "DshProfilesError",
    "EntryPointDiscovery",
    "JobsSection",
    "LoadedProvider",
    "Profile",
    "ProfileCheck",
    "ProfileError",
    "ProviderCandidate",
    "ProviderDiscovery",
    "ProviderRow",
    "RunEvent",
    "RunFailure",
    "RunNotice",
    "RunObserver",
    "RunOutcome",
    "RunPublished",
    "RunSettled",
    "RunStarting",
    "RunStatus",
    "Runtime",
    "SpawnAttemptError",
    "SpawnCounter",
    "StaticDiscovery",
    "ToolRow",
    "UsageError",
    "Warm",
    "check_profile",
    "compose",
    "delegate",
    "exit_code_for",
    "json_record",
    "load_profile",
    "open_runtime",
    "parse_profile",
    "policy_lines",
    "read_profile",
    "run_task",
    "tool_schema",
]

_SOURCES = {
    "ProfileCheck": "dsh_profiles.check",
    "check_profile": "dsh_profiles.check",
    "policy_lines": "dsh_profiles.confinement",
    "EXIT_CODES": "dsh_profiles.run",
    "RunEvent": "dsh_profiles.run",
    "RunFailure": "dsh_profiles.run",
    "RunNotice": "dsh_profiles.run",
    "RunObserver": "dsh_profiles.run",
    "RunOutcome": "dsh_profiles.run",
    "RunPublished": "dsh_profiles.run",
    "RunSettled": "dsh_profiles.run",
    "RunStarting": "dsh_profiles.run",
    "exit_code_for": "dsh_profiles.run",
    "json_record": "dsh_profiles.run",
    "run_task": "dsh_profiles.run",
    "RunStatus": "dsh_profiles.run_status",
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
