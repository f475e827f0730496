"""Which task an isolated run is for, so its branch and commit can be traced back to it.

A host that runs many delegations from a list (``dsh batch``) enters :func:`for_task`
around each start. An isolated run started inside it records the task on its commit as
the trailer ``Dsh-Task: <task>`` and, with the default branch pattern, names its branch
``dsh/<task>-<id>`` (the task reduced to the characters a branch name always accepts).
The task travels as a context variable: it reaches the provider's ``start`` because the
service calls ``start`` in the caller's own task.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final

__all__ = ["TASK_TRAILER", "branch_slug", "current_task", "for_task", "trailer_value"]

TASK_TRAILER: Final = "Dsh-Task"
"""The git trailer that names a run's task on its commit."""

_MAX_SLUG: Final = 48
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]+")

_TASK: ContextVar[str | None] = ContextVar("dsh_worktree_task", default=None)


@contextlib.contextmanager
def for_task(task: str) -> Iterator[None]:
    """Isolated runs started inside this block are for ``task`` (see the module docstring)."""
    token = _TASK.set(task)
    try:
        yield
    finally:
        _TASK.reset(token)


def current_task() -> str | None:
    """The task :func:`for_task` names here, or ``None``."""
    return _TASK.get()


def branch_slug(task: str) -> str:
    """``task`` as part of a branch name: letters, digits, ``_`` and ``-`` (``""`` if none)."""
    return _UNSAFE.sub("-", task).strip("-")[:_MAX_SLUG].strip("-")


def trailer_value(task: str) -> str:
    """``task`` as one trailer line's value (line breaks become spaces)."""
    return " ".join(task.split())
