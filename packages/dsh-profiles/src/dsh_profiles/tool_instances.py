"""A tool row's own isolation: the ``worktree`` setting of a ``[[tools]]`` row.

A tool row's ``worktree`` table is laid field by field over its provider row's (the
provider row's settings, else the defaults, are what it does not set); ``worktree =
false`` runs the tool without isolation. When the result differs from the provider row's
own isolation, the tool gets a second instance of that provider row: the same class and
configuration, registered as ``<provider_name>@<tool name>`` (so continuation handles it
issues name the instance that can honour them) and isolated as the tool row says. Tools
whose isolation matches their provider row's share the row's instance. Nothing here
starts a product or runs git: constructing a provider starts nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh_subagent import SubagentProvider
from dsh_worktree import Worktree, WorktreeError
from pydantic import BaseModel, ValidationError

from dsh_profiles.instance import LoadedProvider
from dsh_profiles.profile import Profile, ToolRow, describe_validation_error

__all__ = ["BuiltRow", "instance_name", "tool_instances"]


@dataclass(frozen=True)
class BuiltRow:
    """What a provider row was built from, kept so a tool row can build a second instance.

    Attributes:
        instance: The row's own instance.
        cls: The provider class.
        raw_config: The row's configuration as validated (``provider_name`` and
            ``pass_env`` applied).
    """

    instance: LoadedProvider
    cls: type[SubagentProvider]
    raw_config: Mapping[str, Any]


def instance_name(provider: str, tool: str) -> str:
    """The registry name of the instance a tool row with its own isolation gets."""
    return f"{provider}@{tool}"


def _settings(
    tool: ToolRow, index: int, base: Worktree | None, raw: Mapping[str, Any]
) -> Worktree | list[str] | None:
    """The tool's effective isolation, or its problem lines."""
    if not isinstance(tool.worktree, dict):
        return None  # ``worktree = false``
    start = base.model_dump(exclude_unset=True) if base is not None else {}
    try:
        return Worktree.model_validate({**start, **tool.worktree})
    except ValidationError as exc:
        return describe_validation_error(exc, prefix=("tools", index - 1, "worktree"), raw=raw)


def _same(one: Worktree | None, other: Worktree | None) -> bool:
    if one is None or other is None:
        return one is other
    return one.model_dump() == other.model_dump()


def _second_instance(source: BuiltRow, name: str) -> tuple[BaseModel, SubagentProvider] | None:
    """The provider row's class and configuration again, named ``name``; ``None`` when the
    class's configuration takes no such name."""
    try:
        config: BaseModel = source.cls.Config.model_validate(  # type: ignore[attr-defined]
            {**source.raw_config, "provider_name": name}
        )
    except ValidationError:
        return None
    provider = source.cls(config)  # type: ignore[call-arg]
    return (config, provider) if provider.name == name else None


def tool_instances(
    profile: Profile, built: Mapping[str, BuiltRow]
) -> tuple[list[LoadedProvider], list[str]]:
    """The instances tool rows need for their own isolation, and the problems found.

    Tool rows naming an instance that failed to build are skipped (the provider row's
    problem, or the tool row's unknown-instance problem, is reported elsewhere).

    Returns:
        The extra instances in tool-row order, and one line per problem, each naming
        the tool row and its field (``tools row 2 ('name') field 'worktree.branch': …``).
    """
    raw = {"tools": [row.model_dump() for row in profile.tools]}
    taken = set(built)
    derived: list[LoadedProvider] = []
    problems: list[str] = []
    for index, tool in enumerate(profile.tools, start=1):
        source = built.get(tool.provider)
        if tool.worktree is None or source is None:
            continue
        where = f"tools row {index} ({tool.name!r}) field 'worktree'"
        base = source.instance.worktree
        settings = _settings(tool, index, base, raw)
        if isinstance(settings, list):
            problems.extend(settings)
            continue
        if _same(settings, base):
            continue  # the provider row's own instance already runs as this row asks
        name = instance_name(tool.provider, tool.name)
        if name in taken:
            problems.append(
                f"{where}: its own instance would be named {name!r}, which a provider row "
                "already uses; rename that provider row"
            )
            continue
        built_instance = _second_instance(source, name)
        if built_instance is None:
            problems.append(
                f"{where}: provider type {source.instance.type!r} cannot be given a second "
                f"instance name ({name!r}); isolate a separate provider row instead"
            )
            continue
        config, provider = built_instance
        if settings is not None:
            try:
                provider = settings.isolate(provider)
            except WorktreeError as exc:
                problems.append(f"{where}: {exc.message}")
                continue
        taken.add(name)
        derived.append(
            dataclasses.replace(
                source.instance,
                config=config,
                provider=provider,
                worktree=settings,
                tool=tool.name,
            )
        )
    return derived, problems
