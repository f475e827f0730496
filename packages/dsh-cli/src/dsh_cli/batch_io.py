"""The files of ``dsh batch``: the task list it reads and the results file it appends to.

A task file is JSON Lines, one object per task::

    {"id": "ticket-17", "task": "Summarise ticket 17 in one line.", "cwd": "repos/app"}

``id`` (a non-empty string, unique in the file) and ``task`` (the complete, self-contained
task text) are required; ``cwd`` is optional. A line that is not such an object is a *bad
line*: it is reported with its line number and skipped, never silently. A blank line
carries no task and is ignored.

The results file is JSON Lines too, one :class:`BatchRecord` per settled task, appended as
each task settles (one ``write`` of one whole line). Reading it back gives the ids already
done, so an interrupted batch resumes where it stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

from dsh_subagent import Changes, Usage
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from dsh_cli.errors import UsageError

__all__ = [
    "BadLine",
    "BatchRecord",
    "BatchTask",
    "ResultsFile",
    "TaskList",
    "read_tasks",
]

MAX_TASK_LINE_BYTES: Final = 1_048_576
"""A task line longer than this is a bad line (a task is text, not a data dump)."""


class BatchTask(BaseModel):
    """One line of the task file."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """The task's name in the results file; unique within the task file."""
    task: Annotated[str, StringConstraints(min_length=1)]
    """The complete, self-contained task text."""
    cwd: Annotated[str, StringConstraints(min_length=1)] | None = None
    """The workspace; relative paths resolve against the batch's base directory."""


class BatchRecord(BaseModel):
    """The outcome of one task, one line of the results file.

    Attributes:
        id: The task's id.
        stop_reason: ``completed``, ``error``, ``max-tokens``, ``refusal``, ``aborted`` …
        answer: The output text; for a stop reason other than ``completed``, whatever
            partial output the product produced (often empty).
        diagnostic: The run's safe diagnostic (never product text beyond its bounded
            stderr tail, never a credential), or why the task could not start.
        usage: Tokens and cost exactly as the product reported them; ``None`` when it
            reported none.
        changes: Where an isolated run's changes went (branch, commit, base, counts);
            ``None`` without isolation.
        elapsed_seconds: From the start of the delegation to its settled, disposed end.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")
    id: str
    stop_reason: str
    answer: str = ""
    diagnostic: str | None = None
    usage: Usage | None = None
    changes: Changes | None = None
    elapsed_seconds: float = Field(ge=0)

    def to_line(self) -> str:
        """The record as one JSON line (with its newline)."""
        return self.model_dump_json() + "\n"


@dataclass(frozen=True)
class BadLine:
    """A task line that was skipped, and why (never echoing the line itself)."""

    line_no: int
    reason: str


@dataclass(frozen=True)
class TaskList:
    """The good tasks in file order and the bad lines, each with its line number."""

    tasks: tuple[BatchTask, ...]
    bad_lines: tuple[BadLine, ...]


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(part) for part in item["loc"]) or "line"
        if item["type"] == "extra_forbidden":
            parts.append(f"unknown field {field!r}")
        elif item["type"] == "missing":
            parts.append(f"field {field!r} is missing")
        elif item["type"] == "string_too_short":
            parts.append(f"field {field!r} is empty")
        elif item["type"] == "string_type":
            parts.append(f"field {field!r} must be a string")
        else:
            parts.append(f"field {field!r}: {item['msg']}")
    return "; ".join(parts)


def read_tasks(path: str | Path) -> TaskList:
    """Read a task file; bad lines are collected, not raised.

    Raises:
        UsageError: the file cannot be read at all.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read the task file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    tasks: list[BatchTask] = []
    bad: list[BadLine] = []
    first_line_of: dict[str, int] = {}
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue  # a blank line (or the end of the file) carries no task
        if len(raw) > MAX_TASK_LINE_BYTES:
            bad.append(BadLine(line_no, f"longer than {MAX_TASK_LINE_BYTES} bytes"))
            continue
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            bad.append(BadLine(line_no, "not valid JSON"))
            continue
        if not isinstance(value, dict):
            bad.append(BadLine(line_no, "not a JSON object"))
            continue
        try:
            task = BatchTask.model_validate(value)
        except ValidationError as exc:
            bad.append(BadLine(line_no, _describe(exc)))
            continue
        if not task.task.strip():
            bad.append(BadLine(line_no, "field 'task' is blank"))
            continue
        if task.id in first_line_of:
            bad.append(
                BadLine(
                    line_no, f"duplicate id {task.id!r} (first on line {first_line_of[task.id]})"
                )
            )
            continue
        first_line_of[task.id] = line_no
        tasks.append(task)
    return TaskList(tuple(tasks), tuple(bad))


class ResultsFile:
    """The results file: the ids it already holds, and appending one record at a time.

    A line that is not a record (e.g. cut short when the machine lost power) is counted
    in :attr:`unreadable` and ignored: its task runs again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.done: set[str] = set()
        self.unreadable: list[int] = []
        self._needs_newline = False
        self._fd: int | None = None
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise UsageError(
                f"cannot read the results file {str(self.path)!r}: {exc.strerror or exc}"
            ) from None
        self._needs_newline = bool(data) and not data.endswith(b"\n")
        for line_no, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
                record = BatchRecord.model_validate(value)
            except (ValueError, UnicodeDecodeError):  # ValidationError is a ValueError
                self.unreadable.append(line_no)
                continue
            self.done.add(record.id)

    def open(self) -> None:
        """Open for appending (created if missing).

        Raises:
            UsageError: the file cannot be created or written.
        """
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(
                f"cannot write the results file {str(self.path)!r}: {exc.strerror or exc}"
            ) from None
        if self._needs_newline:  # a cut-short last line stays its own (unreadable) line
            os.write(self._fd, b"\n")
            self._needs_newline = False

    def append(self, record: BatchRecord) -> None:
        """Append one record as one write of one whole line."""
        if self._fd is None:
            raise RuntimeError("ResultsFile.open() was not called")
        data = record.to_line().encode("utf-8")
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        self.done.add(record.id)

    def close(self) -> None:
        """Close the file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
