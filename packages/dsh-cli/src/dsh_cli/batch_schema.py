"""``dsh batch --output-schema FILE``: one schema for every task that names none.

A task line may carry its own ``output_schema``; the batch-wide schema is folded into the
other tasks before anything runs, so it travels with each task wherever the task runs
(here or on a Ray worker) and each record's ``structured`` carries the validated object.
"""

from __future__ import annotations

import argparse
import dataclasses

from dsh_profiles.loader import Composition
from dsh_profiles.output_schema import load_output_schema
from pydantic import JsonValue

from dsh_cli.batch_io import TaskList

__all__ = ["add_output_schema_flag", "typed_row_schema", "with_output_schema", "with_schema"]


def add_output_schema_flag(parser: argparse.ArgumentParser) -> None:
    """The ``--output-schema`` option of ``dsh batch``."""
    parser.add_argument(
        "--output-schema",
        metavar="FILE",
        default=None,
        help="a JSON Schema (object root) every task's answer must match, unless the task "
        "line has its own output_schema; records then carry 'structured' (the validated "
        "object), and an answer that does not match is an error record (output-invalid)",
    )


def with_output_schema(tasks: TaskList, path: str | None) -> TaskList:
    """``tasks`` with the schema in ``path`` given to every task that has none.

    Raises:
        UsageError: the file is unreadable or not an object-rooted JSON Schema.
    """
    return with_schema(tasks, load_output_schema(path))


def with_schema(tasks: TaskList, schema: dict[str, JsonValue] | None) -> TaskList:
    """``tasks`` with ``schema`` given to every task that has none (``None``: unchanged)."""
    if schema is None:
        return tasks
    folded = tuple(
        task
        if task.output_schema is not None
        else task.model_copy(update={"output_schema": schema})
        for task in tasks.tasks
    )
    return dataclasses.replace(tasks, tasks=folded)


def typed_row_schema(
    composition: Composition, target: str, instance: bool
) -> dict[str, JsonValue] | None:
    """The ``output_schema`` of the tool row ``target`` names (``None``: none, or an
    instance name): a typed tool's tasks are typed wherever they run."""
    if instance:
        return None
    row = next((t for t in composition.tools if t.name == target), None)
    return None if row is None else row.output_schema
