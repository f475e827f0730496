"""What ``dsh run`` and ``dsh batch`` read the same way: the target, its typed row's schema and
the budget flags' values.

One parser each, so the same mistake gets the same one-line message from both commands.
"""

from __future__ import annotations

import argparse
import math

from dsh_subagent import Budget
from pydantic import JsonValue

from dsh_profiles.errors import UsageError
from dsh_profiles.loader import Composition

__all__ = ["budget_from", "resolve_target", "typed_row_schema"]


def _seconds(flag: str, text: str | None) -> float | None:
    """A flag's positive, finite number of seconds, or ``None`` when it was not given."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: expected a positive number of seconds, got {text!r}")
    return value


def budget_from(args: argparse.Namespace) -> Budget | None:
    """The request budget the flags ask for; ``None`` when neither was given.

    Raises:
        UsageError: a flag's value is not a positive, finite number of seconds.
    """
    deadline = _seconds("--timeout", args.timeout)
    idle = _seconds("--idle-timeout", args.idle_timeout)
    if deadline is None and idle is None:
        return None  # a provider that does not honour budgets is not refused for nothing
    return Budget(deadline_seconds=deadline, idle_timeout_seconds=idle)


def resolve_target(composition: Composition, target: str, instance: bool) -> str:
    """The provider instance a command's ``TARGET`` names: a tool row, else an instance.

    Raises:
        UsageError: nothing of that name (the message lists what there is).
    """
    if not instance:
        for tool in composition.tools:
            if tool.name == target:
                return composition.instance_for(tool.name)
    names = [p.name for p in composition.providers]
    if target in names:
        return target
    tools = ", ".join(t.name for t in composition.tools) or "none"
    raise UsageError(
        f"unknown {'instance' if instance else 'tool or instance'} {target!r} "
        f"(tools: {tools}; instances: {', '.join(names) or 'none'})"
    )


def typed_row_schema(
    composition: Composition, target: str, instance: bool
) -> dict[str, JsonValue] | None:
    """The ``output_schema`` of the tool row ``target`` names (``None``: none, or an
    instance name): a typed tool's tasks are typed wherever they run."""
    if instance:
        return None
    row = next((t for t in composition.tools if t.name == target), None)
    return None if row is None else row.output_schema
