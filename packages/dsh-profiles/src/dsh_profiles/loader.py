"""The Loader: profile → resolved entry points → validated, constructed, unstarted providers.

Loading is pure composition. It imports the named provider classes, validates each
``config`` table with the class's ``Config`` model, constructs ``Provider(config)`` and
checks the tool rows. It starts no product process: a provider's constructor validates
nothing further and starts nothing (architecture contract), and nothing here spawns.
Every problem found is reported at once, each naming its row and field.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh_subagent import SubagentProvider
from dsh_tool_jobs.config import JobsToolsConfig
from dsh_worktree import Worktree, WorktreeError
from pydantic import BaseModel, ValidationError

from dsh_profiles.confinement import override_confinement
from dsh_profiles.discovery import EntryPointDiscovery, ProviderDiscovery
from dsh_profiles.errors import ProfileError
from dsh_profiles.instance import LoadedProvider
from dsh_profiles.profile import Profile, ToolRow, describe_validation_error, read_profile
from dsh_profiles.tool_instances import BuiltRow, tool_instances
from dsh_profiles.warm import Warm, apply_warm

__all__ = ["JOB_TOOL_NAMES", "Composition", "LoadedProvider", "compose", "load_profile"]

JOB_TOOL_NAMES = ("job_output", "job_list", "job_kill")
"""The generic Job control tools bound when the profile's ``[jobs]`` table asks for them."""


@dataclass(frozen=True)
class Composition:
    """What a profile composes: providers in profile order, tool rows, job controls."""

    source: str
    providers: tuple[LoadedProvider, ...]
    tools: tuple[ToolRow, ...]
    job_tools: bool
    jobs_config: JobsToolsConfig

    def provider(self, name: str) -> LoadedProvider:
        """The instance registered as ``name``.

        Raises:
            KeyError: no such instance.
        """
        for loaded in self.providers:
            if loaded.name == name:
                return loaded
        raise KeyError(name)

    def instance_for(self, tool: str) -> str:
        """The registry name the tool row ``tool`` delegates to: its own instance when the
        row's ``worktree`` setting differs from its provider row's, else its provider.

        Raises:
            KeyError: no such tool row.
        """
        for loaded in self.providers:
            if loaded.tool == tool:
                return loaded.name
        for row in self.tools:
            if row.name == tool:
                return row.provider
        raise KeyError(tool)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Every model-visible tool name: subagent tools in order, then job tools."""
        names = tuple(tool.name for tool in self.tools)
        return names + JOB_TOOL_NAMES if self.job_tools else names


def _row_label(index: int, ident: str | None) -> str:
    return f"providers row {index}" + (f" ({ident!r})" if ident else "")


_SHIPPED_IN = {
    "codex": "dsh-subagent-codex",
    "claude-code": "dsh-subagent-claude-code",
    "acp": "dsh-subagent-acp",
}
"""The distribution that provides each provider type this project ships."""


def _resolve_class(
    row_no: int, row_type: str, ident: str | None, discovery: ProviderDiscovery
) -> tuple[type[SubagentProvider], str] | str:
    """The provider class for ``row_type``, or a problem line."""
    where = f"{_row_label(row_no, ident)} field 'type'"
    candidates = discovery.candidates(row_type)
    if not candidates:
        installed = ", ".join(discovery.names()) or "none"
        hint = _SHIPPED_IN.get(row_type)
        install = f"; install {hint} beside dsh-profiles" if hint else ""
        return (
            f"{where}: no provider named {row_type!r} is installed (installed: {installed})"
            f"{install}"
        )
    if len(candidates) > 1:
        listed = "; ".join(c.describe() for c in candidates)
        return f"{where}: provider name {row_type!r} is ambiguous, advertised by: {listed}"
    candidate = candidates[0]
    try:
        obj = candidate.load()
    except Exception as exc:  # an import failure is a profile problem, reported with the row
        return f"{where}: provider {row_type!r} ({candidate.describe()}) failed to import: {exc!r}"
    if not (isinstance(obj, type) and issubclass(obj, SubagentProvider)):
        return f"{where}: {candidate.describe()} is not a SubagentProvider class"
    config_model = getattr(obj, "Config", None)
    if not (isinstance(config_model, type) and issubclass(config_model, BaseModel)):
        return f"{where}: {candidate.describe()} has no pydantic `Config` class attribute"
    return obj, candidate.describe()


def compose(
    profile: Profile,
    *,
    source: str = "<profile>",
    discovery: ProviderDiscovery | None = None,
    host_env: Mapping[str, str] | None = None,
    confinement: str | None = None,
    warm: Warm | None = None,
) -> Composition:
    """Resolve, validate and construct every provider and check every tool row.

    Args:
        profile: A parsed profile.
        source: Profile label used in error messages (usually its path).
        discovery: Where provider classes come from; defaults to installed entry points.
        host_env: Where ``pass_env`` names are read; defaults to ``os.environ``.
        confinement: ``--confinement``: every instance's ``confinement.mode``, over the
            profile's (``auto``, ``required`` or ``off``); ``None`` keeps the profile's.
        warm: The surface's ``warm`` (``--warm``, or its default for rows that set
            none); ``None`` keeps the profile's.

    Raises:
        ProfileError: listing every problem, each naming its row and field.
    """
    discovery = discovery if discovery is not None else EntryPointDiscovery()
    host = os.environ if host_env is None else host_env
    problems: list[str] = []
    loaded: list[LoadedProvider] = []
    built: dict[str, BuiltRow] = {}
    first_row_of: dict[str, int] = {}
    loaded_idents: set[str] = set()
    raw_rows = {"providers": [row.model_dump() for row in profile.providers]}
    for index, row in enumerate(profile.providers, start=1):
        ident = row.provider_name or row.type
        if "provider_name" in row.config:
            problems.append(
                f"{_row_label(index, ident)} field 'config.provider_name': set provider_name "
                "on the row itself, not inside config"
            )
            continue
        resolved = _resolve_class(index, row.type, ident, discovery)
        if isinstance(resolved, str):
            problems.append(resolved)
            continue
        cls, origin = resolved
        raw_config: dict[str, Any] = dict(row.config)
        if row.provider_name is not None:
            raw_config["provider_name"] = row.provider_name
        if row.pass_env:
            env = raw_config.get("env", {})
            clash = [name for name in row.pass_env if isinstance(env, Mapping) and name in env]
            if clash or not isinstance(env, Mapping):
                problems.append(
                    f"{_row_label(index, ident)} field 'pass_env': "
                    + (
                        f"{clash[0]!r} is also set in config.env"
                        if clash
                        else "config.env is not a table"
                    )
                )
                continue
            raw_config["env"] = {**env, **{n: host[n] for n in row.pass_env if n in host}}
        if confinement is not None:
            problem = override_confinement(raw_config, cls.Config, confinement)  # type: ignore[attr-defined]
            if problem is not None:
                problems.append(f"{_row_label(index, ident)}: {problem}")
                continue
        if warm is not None:
            apply_warm(raw_config, cls.Config, warm)  # type: ignore[attr-defined]
        try:
            config = cls.Config.model_validate(raw_config)  # type: ignore[attr-defined]
        except ValidationError as exc:
            lines = describe_validation_error(
                exc, prefix=("providers", index - 1, "config"), raw=raw_rows
            )
            # provider_name came from the row, so its problems point at the row's field.
            problems.extend(
                line.replace("field 'config.provider_name'", "field 'provider_name'")
                for line in lines
            )
            continue
        provider = cls(config)  # type: ignore[call-arg]
        worktree: Worktree | None = None
        if row.worktree is not None:
            try:
                worktree = Worktree.model_validate(row.worktree)
                provider = worktree.isolate(provider)
            except ValidationError as exc:
                problems.extend(
                    describe_validation_error(
                        exc, prefix=("providers", index - 1, "worktree"), raw=raw_rows
                    )
                )
                continue
            except WorktreeError as exc:
                problems.append(f"{_row_label(index, ident)} field 'worktree': {exc.message}")
                continue
        name = provider.name
        if name in first_row_of:
            problems.append(
                f"{_row_label(index, name)} field 'provider_name': duplicate provider name "
                f"{name!r} (already used by providers row {first_row_of[name]}); "
                "give each instance its own provider_name"
            )
            continue
        first_row_of[name] = index
        loaded_idents.add(ident)
        instance = LoadedProvider(index, row.type, origin, config, provider, worktree)
        loaded.append(instance)
        built[name] = BuiltRow(instance, cls, raw_config)

    # A tool of a row that failed above is not reported again: the row's problem says why.
    failed = {row.provider_name or row.type for row in profile.providers} - loaded_idents
    problems.extend(_check_tools(profile, first_row_of, failed))
    derived, derive_problems = tool_instances(profile, built)
    loaded.extend(derived)
    problems.extend(derive_problems)
    jobs_config = JobsToolsConfig()
    if profile.jobs is not None:
        try:
            jobs_config = JobsToolsConfig.model_validate(profile.jobs.config)
        except ValidationError as exc:
            problems.extend(
                line.replace("field 'config.", "[jobs] field 'config.")
                for line in describe_validation_error(exc, prefix=("config",))
            )
    if problems:
        raise ProfileError(source, problems)
    return Composition(source, tuple(loaded), profile.tools, profile.job_tools, jobs_config)


def _check_tools(
    profile: Profile, instances: Mapping[str, int], failed: Collection[str]
) -> Sequence[str]:
    problems = []
    seen: dict[str, int] = {}
    reserved = set(JOB_TOOL_NAMES) if profile.job_tools else set()
    for index, tool in enumerate(profile.tools, start=1):
        where = f"tools row {index} ({tool.name!r})"
        if tool.name in seen:
            problems.append(
                f"{where} field 'name': duplicate tool name (already used by tools row "
                f"{seen[tool.name]})"
            )
        elif tool.name in reserved:
            problems.append(f"{where} field 'name': {tool.name!r} is a job control tool name")
        else:
            seen[tool.name] = index
        if tool.provider not in instances and tool.provider not in failed:
            known = ", ".join(instances) or "none"
            problems.append(
                f"{where} field 'provider': no provider instance named {tool.provider!r} "
                f"(instances: {known})"
            )
        if tool.background_mode == "one-shot" and not profile.job_tools:
            problems.append(
                f"{where} field 'background_mode': 'one-shot' needs the job control tools; "
                'add a [jobs] table or set background_mode = "disabled"'
            )
    return problems


def load_profile(
    path: str | Path,
    *,
    discovery: ProviderDiscovery | None = None,
    confinement: str | None = None,
) -> Composition:
    """Read a TOML profile and compose it (see :func:`compose`).

    Raises:
        ProfileError: the file is unreadable or invalid, naming rows and fields.
    """
    return compose(
        read_profile(path), source=str(path), discovery=discovery, confinement=confinement
    )
