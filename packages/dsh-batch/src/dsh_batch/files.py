"""The files of a batch: the task list it reads and the results file it appends to.

A task file is JSON Lines, one object per task::

    {"id": "ticket-17", "task": "Summarise ticket 17 in one line.", "cwd": "repos/app"}

``id`` (a non-empty string without control characters, unique in the file) and
``task`` (the complete, self-contained task text) are required; ``cwd`` and
``output_schema`` (a JSON Schema the answer must match) are optional. A line that is not
such an object is a *bad line*: it is reported with its line number and skipped, never
silently. A blank line carries no task and is ignored.

The results file is JSON Lines too, one :class:`BatchRecord` per settled task, appended as
each task settles (one ``write`` of one whole line). Reading it back gives the latest
record of every id, so an interrupted batch resumes where it stopped and
``--retry-failed`` finds the tasks whose latest record is not ``completed``.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Final

from dsh_profiles.errors import UsageError
from dsh_subagent import COMPLETED, Changes, SubagentError, Usage
from dsh_subagent.structured import check_output_schema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    ValidationError,
    field_validator,
)

__all__ = [
    "BadLine",
    "BatchRecord",
    "BatchTask",
    "ResultsFile",
    "TaskList",
    "UsageTotals",
    "describe_error",
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
    output_schema: dict[str, JsonValue] | None = None
    """The JSON Schema (object root) this task's answer must match; the record's
    ``structured`` then carries the validated object. Default: the batch's
    ``--output-schema``, else none."""

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        # The id is printed in progress lines and the summary on a terminal: a control or
        # format character (newline, ESC, a bidi override) would forge or hide output.
        if any(unicodedata.category(char) in ("Cc", "Cf") for char in value):
            raise ValueError("must not hold control or format characters")
        return value


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
        structured: The validated object of a task with an output schema.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")
    id: str
    stop_reason: str
    answer: str = ""
    diagnostic: str | None = None
    usage: Usage | None = None
    changes: Changes | None = None
    elapsed_seconds: float = Field(ge=0)
    structured: JsonValue = None
    """The validated answer of a task with an output schema (``None`` otherwise, or when
    it failed); written only when set, so records of batches without schemas are as
    before."""

    def to_line(self) -> str:
        """The record as one JSON line (with its newline)."""
        exclude = {"structured"} if self.structured is None else None
        return self.model_dump_json(exclude=exclude) + "\n"


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
    line_of: dict[str, int] = field(default_factory=dict)
    """The line number of every good task, by id."""


def describe_error(error: ValidationError) -> str:
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
        elif item["type"] == "value_error":
            parts.append(f"field {field!r} {item['ctx']['error']}")
        else:
            parts.append(f"field {field!r}: {item['msg']}")
    return "; ".join(parts)


def read_tasks(path: str | Path) -> TaskList:
    """Read a task file; bad lines are collected, not raised.

    Raises:
        UsageError: the file cannot be read at all.
    """
    try:
        with Path(path).open("rb") as stream:
            return _task_list(_bounded_lines(stream))
    except OSError as exc:
        raise UsageError(
            f"cannot read the task file {str(path)!r}: {exc.strerror or exc}"
        ) from None


def _bounded_lines(stream: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines without their newline; ``None`` for one over the bound, whose
    rest is read past in bounded chunks (never held: a line has no business being
    gigabytes, and ``/dev/zero`` has no end)."""
    while raw := stream.readline(MAX_TASK_LINE_BYTES + 1):
        if raw.endswith(b"\n"):
            yield raw[:-1]
        elif len(raw) <= MAX_TASK_LINE_BYTES:
            yield raw  # the last line, without a newline
        else:
            while (rest := stream.readline(MAX_TASK_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None


def _task_list(lines: Iterable[bytes | None]) -> TaskList:
    tasks: list[BatchTask] = []
    bad: list[BadLine] = []
    first_line_of: dict[str, int] = {}
    for line_no, raw in enumerate(lines, start=1):
        if raw is None:
            bad.append(BadLine(line_no, f"longer than {MAX_TASK_LINE_BYTES} bytes"))
            continue
        if not raw.strip():
            continue  # a blank line carries no task
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
            bad.append(BadLine(line_no, describe_error(exc)))
            continue
        if not task.task.strip():
            bad.append(BadLine(line_no, "field 'task' is blank"))
            continue
        if task.output_schema is not None:
            try:
                check_output_schema(task.output_schema)
            except SubagentError as exc:
                bad.append(BadLine(line_no, f"field 'output_schema': {exc.message}"))
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
    return TaskList(tuple(tasks), tuple(bad), first_line_of)


class ResultsFile:
    """The results file of one batch, held under an exclusive lock while the batch runs.

    :meth:`open` creates the file if it is missing, takes an exclusive ``flock`` on it
    (POSIX advisory locking: every ``dsh batch`` takes it, so a second batch on the same
    file is refused at once; the kernel drops it when ``dsh`` exits, however it exits)
    and reads what the file holds. The **latest record per id counts**: a task retried
    with ``--retry-failed`` appends a new record, and that one is its outcome.

    A line that is not a record (e.g. cut short when the machine lost power) is counted
    in :attr:`unreadable` and ignored: its task runs again.

    Attributes:
        latest: The latest record of every id in the file (and of every appended one).
        unreadable: Line numbers of lines that are not records.
        usage: Totals of the records appended by this batch.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.latest: dict[str, BatchRecord] = {}
        self.unreadable: list[int] = []
        self.usage = UsageTotals()
        self._needs_newline = False
        self._fd: int | None = None
        self._created = False
        self._appended = False

    @property
    def done(self) -> set[str]:
        """Ids with a record, whatever its stop reason."""
        return set(self.latest)

    @property
    def completed(self) -> set[str]:
        """Ids whose latest record is ``completed``."""
        return {key for key, record in self.latest.items() if record.stop_reason == COMPLETED}

    def open(self) -> None:
        """Open (created if missing), take the exclusive lock and read the records.

        Raises:
            UsageError: the file cannot be read or written, or another batch holds it.
        """
        import fcntl  # POSIX only, like the rest of dsh's process handling

        fd, created = self._open_fd()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            # A FIFO cannot be read back (resume) and /dev/zero never ends: records go to
            # a file.
            os.close(fd)
            raise UsageError(
                f"the results file {str(self.path)!r} is not a regular file; give the path "
                "of a file to append records to"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(
                f"another dsh batch is writing the results file {str(self.path)!r}; "
                "wait for it to end or give another --out"
            ) from None
        self._fd, self._created = fd, created
        try:
            self._load(fd)
        except BaseException:
            self.close()
            raise

    def _open_fd(self) -> tuple[int, bool]:
        flags = os.O_RDWR | os.O_APPEND
        try:
            while True:
                try:
                    return os.open(self.path, flags), False
                except FileNotFoundError:
                    pass
                try:
                    return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
                except FileExistsError:  # created meanwhile by someone else: open theirs
                    continue
        except OSError as exc:
            raise UsageError(
                f"cannot write the results file {str(self.path)!r}: {exc.strerror or exc}"
            ) from None

    def _load(self, fd: int) -> None:
        data = b""
        while chunk := os.pread(fd, 1 << 20, len(data)):
            data += chunk
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
            self.latest[record.id] = record

    @property
    def kept(self) -> bool:
        """The file stays after :meth:`close` (it existed before, or a record was written)."""
        return not self._created or self._appended

    def append(self, record: BatchRecord) -> None:
        """Append one record as one write of one whole line."""
        if self._fd is None:
            raise RuntimeError("ResultsFile.open() was not called")
        data = record.to_line().encode("utf-8")
        if self._needs_newline:  # a cut-short last line stays its own (unreadable) line
            data = b"\n" + data
            self._needs_newline = False
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        self._appended = True
        self.latest[record.id] = record
        self.usage.add(record)

    def close(self) -> None:
        """Release the lock and close the file (idempotent).

        A file this batch created and never wrote to is removed again: a batch refused
        before its first task leaves nothing behind.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._created and not self._appended:
                with contextlib.suppress(OSError):
                    self.path.unlink()
        finally:
            os.close(fd)  # releases the lock


@dataclass
class UsageTotals:
    """Tokens and cost summed over records, counting only what products reported."""

    records: int = 0
    reported: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    costed: int = 0
    cost_usd: float = 0.0

    def add(self, record: BatchRecord) -> None:
        """Count one record."""
        self.records += 1
        usage = record.usage
        if usage is None:
            return
        if usage.input_tokens is not None or usage.output_tokens is not None:
            self.reported += 1
            self.input_tokens += usage.input_tokens or 0
            self.output_tokens += usage.output_tokens or 0
        if usage.cost_usd is not None:
            self.costed += 1
            self.cost_usd += usage.cost_usd

    def describe(self) -> str:
        """``tokens 1,843 in, 61 out; cost $0.0123`` (a part only where reported), or ``""``.

        When only some records reported, the part says how many (``2 of 3 tasks``): the
        total is then a lower bound.
        """
        parts = []
        if self.reported:
            parts.append(
                f"tokens {self.input_tokens:,} in, {self.output_tokens:,} out"
                + self._partial(self.reported)
            )
        if self.costed:
            parts.append(f"cost ${self.cost_usd:.4f}" + self._partial(self.costed))
        return "; ".join(parts)

    def _partial(self, count: int) -> str:
        return "" if count == self.records else f" ({count} of {self.records} tasks reported)"
