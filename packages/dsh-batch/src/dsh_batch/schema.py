"""A batch-wide output schema: one schema for every task that names none.

A task line may carry its own ``output_schema``; the batch-wide schema is folded into the
other tasks before anything runs, so it travels with each task wherever the task runs
(here or on a Ray worker) and each record's ``structured`` carries the validated object.
"""

from __future__ import annotations

import dataclasses

from dsh_profiles.options import typed_row_schema
from dsh_profiles.output_schema import load_output_schema
from pydantic import JsonValue

from dsh_batch.files import TaskList

# typed_row_schema is dsh_profiles.options'; named here for the batch modules that use it.
__all__ = ["typed_row_schema", "with_output_schema", "with_schema"]


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
