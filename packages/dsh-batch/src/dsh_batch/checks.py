"""What a batch checks before its first task (``dsh batch`` and ``run_batch``): each failure
is one usage error.

A batch either starts with everything it can know up front in order (the ``--cwd``
directory, the results path, every task's workspace on this machine) or starts nothing
and records nothing: a mistake in the command line must not turn into one failed record
per task that a resumed batch would then skip.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from dsh_profiles.errors import UsageError

from dsh_batch.files import BatchTask

__all__ = ["check_base", "check_out_path", "check_task_cwds", "is_directory"]


def is_directory(path: str) -> bool:
    """``path`` is a directory this process may enter (what a product's cwd must be)."""
    return os.path.isdir(path) and os.access(path, os.X_OK)


def check_base(cwd: str | None, *, name: str = "--cwd") -> str:
    """The absolute base directory of a local batch (``cwd``, default: here; ``name``:
    how the user gave it).

    Raises:
        UsageError: ``cwd`` is not an accessible directory.
    """
    base = os.path.abspath(cwd or ".")
    if not is_directory(base):
        raise UsageError(f"{name} {cwd!r} is not an accessible directory")
    return base


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_out_path(out: str, tasks: str | None, profile: str, *, name: str = "--out") -> None:
    """``out`` names a file that may receive records (``name``: how the user gave it).

    Raises:
        UsageError: it is a directory, the task file (``tasks``, if any) or the profile.
    """
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"{name} {out!r} is a directory; give the results file's path")
    if tasks is not None and _same(path, Path(tasks)):
        raise UsageError(f"{name} {out!r} is the task file; give the results file its own path")
    if _same(path, Path(profile)):
        raise UsageError(f"{name} {out!r} is the profile; give the results file its own path")


def check_task_cwds(
    todo: Sequence[tuple[BatchTask, str]], line_of: Mapping[str, int], tasks_path: str
) -> None:
    """Every task about to run has a workspace that exists here.

    Args:
        todo: Each task with its resolved cwd.
        line_of: The task file's line number of each id.
        tasks_path: The task file, as the user named it.

    Raises:
        UsageError: a task's cwd is not an accessible directory (the first one is named,
            with its line; the others are counted).
    """
    missing = [(task, cwd) for task, cwd in todo if not is_directory(cwd)]
    if not missing:
        return
    task, cwd = missing[0]
    line = line_of.get(task.id)
    where = f"{tasks_path} line {line}" if line is not None else tasks_path
    more = len(missing) - 1
    also = f" (and {more} more task{'s' if more != 1 else ''} like it)" if more else ""
    raise UsageError(
        f"{where}: task {task.id!r}: cwd {cwd!r} is not an accessible directory{also}; "
        "nothing started"
    )
