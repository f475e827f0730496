"""The batch engine: what a batch runs, how one task becomes one record, and its plan.

A batch runs every task of a task list (:mod:`dsh_batch.files`) on one provider instance
and appends one :class:`~dsh_batch.files.BatchRecord` per task as each settles. The
latest record per id counts: :func:`select_tasks` leaves out the ids a results file
already holds (so running a batch again resumes it) and, with ``retry_failed``, keeps
the ids whose latest record is not ``completed``. The local runner is
:mod:`dsh_batch.local`, the Ray actor pool :mod:`dsh_batch.ray_pool`; both settle tasks
through :func:`run_task`.

A profile may name files of the batch as ``${DSH_FILES}``: it stands for the batch's
files directory here, and for the copy of that directory Ray unpacked on each node.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import ProfileError
from dsh_profiles.loader import Composition, compose
from dsh_profiles.profile import parse_profile, read_profile
from dsh_profiles.warm import Warm
from dsh_subagent import (
    ABORTED,
    ERROR,
    Budget,
    CancelSignal,
    Changes,
    ParentContext,
    SubagentError,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    Usage,
)
from dsh_worktree import for_task
from pydantic import JsonValue

from dsh_batch.files import BatchRecord, BatchTask, ResultsFile

__all__ = [
    "BATCH_SESSION",
    "FILES_PLACEHOLDER",
    "BatchPlan",
    "FirstStartAlone",
    "Interrupts",
    "RecordSink",
    "StartGate",
    "Summary",
    "default_concurrency",
    "load_batch_profile",
    "run_task",
    "safe_message",
    "select_tasks",
    "task_cwd",
]

FILES_PLACEHOLDER: Final = "${DSH_FILES}"
"""Stands for the batch's files directory in profile strings and task ``cwd`` values."""

BATCH_SESSION: Final = "dsh-batch"
"""The parent session id every run of a batch carries."""

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


def default_concurrency() -> int:
    """The CPU count this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _substitute(value: Any, files: str) -> Any:
    if isinstance(value, str):
        return value.replace(FILES_PLACEHOLDER, files)
    if isinstance(value, Mapping):
        return {key: _substitute(item, files) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_substitute(item, files) for item in value]
    return value


def _mentions(value: Any) -> bool:
    if isinstance(value, str):
        return FILES_PLACEHOLDER in value
    if isinstance(value, Mapping):
        return any(_mentions(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_mentions(item) for item in value)
    return False


def load_batch_profile(
    path: str | Path,
    files: str | None,
    *,
    discovery: ProviderDiscovery | None = None,
    confinement: str | None = None,
    warm: Warm | None = None,
) -> Composition:
    """Read and compose a profile, replacing ``${DSH_FILES}`` in every string with ``files``
    (``confinement``: the ``--confinement`` override; ``warm``: ready products, see
    :func:`dsh_profiles.loader.compose`).

    Raises:
        ProfileError: the profile is invalid, or it uses ``${DSH_FILES}`` without ``files``.
    """
    source = str(path)
    raw = read_profile(path).model_dump()
    if files is None:
        if _mentions(raw):
            raise ProfileError(source, [f"the profile uses {FILES_PLACEHOLDER}: pass --files DIR"])
        return compose(
            parse_profile(raw, source),
            source=source,
            discovery=discovery,
            confinement=confinement,
            warm=warm,
        )
    return compose(
        parse_profile(_substitute(raw, files), source),
        source=source,
        discovery=discovery,
        confinement=confinement,
        warm=warm,
    )


def task_cwd(task: BatchTask, base: str, files: str | None) -> str:
    """The task's workspace: its ``cwd`` (default ``.``) resolved against ``base``.

    ``${DSH_FILES}`` in it stands for ``files``. Lexical only: the provider probes the
    directory when the run starts, and a missing one fails that task alone.
    """
    raw = task.cwd or "."
    if files is not None:
        raw = raw.replace(FILES_PLACEHOLDER, files)
    return os.path.normpath(os.path.join(base, raw))


class StartGate(Protocol):
    """Orders product starts: ``async with gate.passage(): await service.start(...)``."""

    def passage(self) -> AbstractAsyncContextManager[None]:
        """Held around one product start."""
        ...


class FirstStartAlone:
    """The batch's first product start runs alone; once one start succeeded, none waits.

    Deliberate: a product that initialises state in its home on first use can fail when
    several copies do that at once (two Codex app-servers initialising one fresh
    ``CODEX_HOME`` race on its sqlite state and one exits during ``initialize``). Only
    the start is serialised, and only until the first one succeeded.
    """

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._warm = False

    @asynccontextmanager
    async def _passage(self) -> AsyncIterator[None]:
        if self._warm:
            yield
            return
        async with self._lock:
            yield
            self._warm = True  # not reached when the start failed: the next one goes alone

    def passage(self) -> AbstractAsyncContextManager[None]:
        """Held around one product start."""
        return self._passage()


def safe_message(exc: BaseException) -> str:
    """A failure as one safe line: a SubagentError's message, else only the type name."""
    if isinstance(exc, SubagentError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(safe_message(inner) for inner in exc.exceptions)
    return f"internal error ({type(exc).__name__})"


async def run_task(
    service: SubagentService,
    provider: str,
    task: BatchTask,
    cwd: str,
    cancel: CancelSignal,
    budget: Budget | None = None,
    gate: StartGate | None = None,
) -> BatchRecord | None:
    """Delegate one task, dispose the run and return its record.

    ``gate`` (if given) is held around the product start (see :class:`FirstStartAlone`).

    ``None`` when ``cancel`` fired (the batch was interrupted) and the run was cancelled
    by it: such a task is not recorded, so a resumed batch runs it again. A start that
    fails for another reason is an ``error`` record whose diagnostic says why. The record
    is returned only after the run's whole process tree has exited.
    """
    started = time.monotonic()

    def record(
        stop_reason: str,
        answer: str = "",
        diagnostic: str | None = None,
        usage: Usage | None = None,
        changes: Changes | None = None,
        structured: JsonValue = None,
    ) -> BatchRecord:
        return BatchRecord(
            id=task.id,
            stop_reason=stop_reason,
            answer=answer,
            diagnostic=diagnostic,
            usage=usage,
            changes=changes,
            elapsed_seconds=round(time.monotonic() - started, 3),
            structured=structured,
        )

    request = SubagentStartRequest(
        prompt=(TextBlock(text=task.task),),
        parent=ParentContext(session_id=BATCH_SESSION, cwd=cwd),
        cancel=cancel,
        label=f"dsh batch {task.id}",
        budget=budget,
        output_schema=task.output_schema,
    )
    try:
        # An isolated run names the task on its commit and in its branch (dsh-worktree).
        with for_task(task.id):
            if gate is None:
                run = await service.start(provider, request)
            else:
                async with gate.passage():
                    run = await service.start(provider, request)
    except SubagentError as exc:
        return (
            None if cancel.aborted else record(ERROR, diagnostic=f"could not start: {exc.message}")
        )
    result: SubagentResult | None = None
    failure = "internal error (no result)"
    try:
        result = await run.result()
    except Exception as exc:
        failure = safe_message(exc)
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await run.dispose()
            except Exception as exc:
                result, failure = None, f"teardown failed: {safe_message(exc)}"
    if result is None:
        return record(ERROR, diagnostic=failure)
    if cancel.aborted and result.stop_reason == ABORTED:
        return None
    return record(
        result.stop_reason,
        result.text,
        result.diagnostic,
        result.usage,
        result.changes,
        result.structured,
    )


@dataclass(frozen=True)
class BatchPlan:
    """What a batch will run: the tasks not yet in the results file, in file order."""

    tasks: tuple[BatchTask, ...]
    provider: str
    budget: Budget | None
    concurrency: int


@dataclass(frozen=True)
class Summary:
    """How a batch ended."""

    done: int
    failed: int
    interrupted: bool
    not_run: int
    error: str | None = None

    def exit_code(self, bad_lines: int = 0) -> int:
        """The exit status ``dsh batch`` ends with: ``1`` failed outside its tasks, else
        ``130`` interrupted, else ``0`` when every task completed and no task line was
        bad (``bad_lines``), else ``1``."""
        if self.error is not None:
            return EXIT_FAILED
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_OK if self.failed == 0 and bad_lines == 0 else EXIT_FAILED


class RecordSink(Protocol):
    """Where the runners put each record as its task settles (a :class:`ResultsFile`)."""

    def append(self, record: BatchRecord) -> None:
        """Keep one record."""
        ...


class Interrupts:
    """Requests to stop a batch, in order: the first cancels every run in progress; on
    Ray a second kills the actors running tasks (their guards remove the products).

    :meth:`request` may be called from a signal handler or another thread.
    """

    def __init__(self) -> None:
        self._names: list[str] = []

    def request(self, name: str = "interrupted") -> None:
        """Ask the batch to stop; ``name`` (e.g. ``SIGINT``) appears in its notices."""
        self._names.append(name)

    @property
    def count(self) -> int:
        """Requests so far."""
        return len(self._names)

    @property
    def last(self) -> str | None:
        """The name of the latest request."""
        return self._names[-1] if self._names else None


def select_tasks(
    tasks: tuple[BatchTask, ...], results: ResultsFile, *, retry_failed: bool = False
) -> tuple[BatchTask, ...]:
    """The tasks to run, in order: those without a record in ``results`` (the latest
    record per id counts), and with ``retry_failed`` also those whose latest record is
    not ``completed``."""
    if retry_failed:
        completed = results.completed
        return tuple(task for task in tasks if task.id not in completed)
    recorded = results.done
    return tuple(task for task in tasks if task.id not in recorded)
