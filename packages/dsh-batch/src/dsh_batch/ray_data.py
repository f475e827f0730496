"""Delegation as a Ray Data step: ``ds.map_batches(Delegate, fn_constructor_kwargs=...)``.

:class:`Delegate` is a callable class in the shape Ray Data's ``map_batches`` runs in an
actor pool: each actor builds one, which composes the profile once and keeps one
``SubagentService`` open for its whole life; every batch of rows is then delegated, the
rows of a batch at once (``concurrency`` at a time), each row's product tree gone before
its row comes back. A row carries ``task`` (the complete task text) and optionally
``id`` and ``cwd``; the output batch is the input columns plus ``stop_reason``,
``answer``, ``diagnostic``, ``usage`` (the product's token and cost report as JSON, the
object a batch record carries, or null), ``elapsed_seconds`` and ``changes`` (where the
instance is isolated in a git worktree, see the profile's ``worktree`` setting: the
change summary as JSON — branch, commit, base, files changed, insertions, deletions —
else null). Where pyarrow is installed (always under Ray Data) the batch comes back as a
``pyarrow.Table`` whose added columns have fixed types (strings and a float), so a batch
whose rows all lack a diagnostic still has a ``string`` diagnostic column and files
written per batch (``write_parquet``) share one schema; without pyarrow it is a dict of
lists. A failed delegation (or a row without a task) is a row with ``stop_reason =
"error"`` and a diagnostic saying why, never an exception, so one bad task never fails
the pipeline.

This module imports nothing of Ray: Ray Data constructs and calls the class. An actor
that dies mid-batch (node lost, OOM killer) leaves no product process: the products run
under the host-death guard of the actor's process; whether the batch runs again (from
scratch, on a restarted actor) is Ray Data's actor-restart and task-retry policy. In a
Ray actor the process makes itself not dumpable (:mod:`dsh_subprocess.protect`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
from anyio.from_thread import start_blocking_portal
from dsh_profiles.options import resolve_target
from dsh_profiles.runtime import open_runtime
from dsh_subagent import ERROR, Budget, CancelController, OutputSchema
from dsh_subagent.structured import check_output_schema
from dsh_subprocess.protect import protect_ray_actor_process

from dsh_batch.engine import FirstStartAlone, load_batch_profile, run_task, task_cwd
from dsh_batch.files import BatchRecord, BatchTask
from dsh_batch.schema import typed_row_schema

__all__ = ["OUTPUT_COLUMNS", "STRUCTURED_COLUMN", "Delegate"]

OUTPUT_COLUMNS: Final = (
    "stop_reason",
    "answer",
    "diagnostic",
    "usage",
    "elapsed_seconds",
    "changes",
)
"""The columns :class:`Delegate` adds to each batch."""

STRUCTURED_COLUMN: Final = "structured"
"""The column added with an output schema: the validated answer as JSON text, or null."""


def _rows(batch: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    columns = {name: list(values) for name, values in batch.items()}
    size = max((len(values) for values in columns.values()), default=0)
    return [{name: values[i] for name, values in columns.items()} for i in range(size)]


def _typed(out: dict[str, list[Any]]) -> Any:
    """``out`` as a ``pyarrow.Table`` with the added columns' types fixed, if pyarrow exists.

    Deliberate: inferred from the values, a column whose rows are all null (no row of
    the batch has a diagnostic) would be of Arrow's null type, and per-batch Parquet
    files would disagree on their schema.
    """
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
    except ImportError:
        return out
    types = {name: pa.string() for name in (*OUTPUT_COLUMNS, STRUCTURED_COLUMN)}
    types["elapsed_seconds"] = pa.float64()
    columns = {
        name: pa.array(values, type=types.get(name)) if name in types else values
        for name, values in out.items()
    }
    return pa.table(columns)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value)
    return text or None


class Delegate:
    """Delegate every row of a batch to one provider instance of a profile.

    Args:
        profile: The TOML profile path (on every node: ship it in the job's
            ``working_dir`` and name it relative to it).
        target: A tool name from the profile, or an instance name.
        files: A directory the profile and the rows' ``cwd`` may name as ``${DSH_FILES}``.
        cwd: Base directory of relative row cwds and the cwd of rows without one
            (default: ``files``, else the current directory).
        instance: Treat ``target`` as an instance name only.
        budget: A per-task budget (a :class:`dsh_subagent.Budget` or its fields).
        concurrency: Rows of one batch delegated at once.
        output_schema: A JSON Schema (object root) or pydantic model class every row's
            answer must match (default: the tool row's ``output_schema``, if any). The
            batch then gains :data:`STRUCTURED_COLUMN`: the validated answer as JSON text,
            null for a row that failed (``stop_reason`` ``error``, category
            ``output-invalid`` when the answer did not match).

    Raises:
        ProfileError: The profile is invalid (at construction: the actor fails to start).
        UsageError: ``target`` names nothing in the profile.
    """

    def __init__(
        self,
        profile: str,
        target: str,
        *,
        files: str | None = None,
        cwd: str | None = None,
        instance: bool = False,
        budget: Budget | Mapping[str, Any] | None = None,
        concurrency: int = 1,
        output_schema: OutputSchema | None = None,
    ) -> None:
        protect_ray_actor_process()  # in Ray Data's actor only, before the profile is read
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        files = os.path.abspath(files) if files is not None else None
        composition = load_batch_profile(profile, files)
        self._provider = resolve_target(composition, target, instance)
        self._schema = (
            typed_row_schema(composition, target, instance)
            if output_schema is None
            else check_output_schema(output_schema)
        )
        self._files = files
        self._base = os.path.abspath(cwd or files or os.getcwd())
        self._budget = budget if isinstance(budget, Budget | None) else Budget(**budget)
        self._concurrency = concurrency
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            self._runtime = self._stack.enter_context(
                self._portal.wrap_async_context_manager(open_runtime(composition))
            )
            self._gate: FirstStartAlone = self._portal.call(FirstStartAlone)
        except BaseException:
            self._stack.close()
            raise

    def __call__(self, batch: Mapping[str, Sequence[Any]]) -> Any:
        """The batch with :data:`OUTPUT_COLUMNS` added, one outcome per row, in row order.

        A ``pyarrow.Table`` when pyarrow is installed, else a dict of lists (see the
        module doc).
        """
        rows = _rows(batch)
        records = self._portal.call(self._run_rows, rows)
        out: dict[str, list[Any]] = {name: list(values) for name, values in batch.items()}
        out["stop_reason"] = [record.stop_reason for record in records]
        out["answer"] = [record.answer for record in records]
        out["diagnostic"] = [record.diagnostic for record in records]
        # The same object as a batch record's usage: every field, unreported ones null.
        out["usage"] = [
            record.usage.model_dump_json() if record.usage else None for record in records
        ]
        out["elapsed_seconds"] = [record.elapsed_seconds for record in records]
        out["changes"] = [
            record.changes.model_dump_json() if record.changes else None for record in records
        ]
        if self._schema is not None:
            out[STRUCTURED_COLUMN] = [
                None if record.structured is None else json.dumps(record.structured)
                for record in records
            ]
        return _typed(out)

    async def _run_rows(self, rows: list[dict[str, Any]]) -> list[BatchRecord]:
        records: list[BatchRecord | None] = [None] * len(rows)
        slots = anyio.Semaphore(self._concurrency)

        async def one(index: int, row: dict[str, Any]) -> None:
            async with slots:
                try:
                    records[index] = await self._run_row(index, row)
                except Exception as exc:  # a row never fails the pipeline
                    records[index] = BatchRecord(
                        id=_text(row.get("id")) or str(index),
                        stop_reason=ERROR,
                        diagnostic=f"internal error ({type(exc).__name__})",
                        elapsed_seconds=0,
                    )

        async with anyio.create_task_group() as group:
            for index, row in enumerate(rows):
                group.start_soon(one, index, row)
        return [record for record in records if record is not None]

    async def _run_row(self, index: int, row: dict[str, Any]) -> BatchRecord:
        task_id = _text(row.get("id")) or str(index)
        task_text = _text(row.get("task"))
        if task_text is None:
            return BatchRecord(
                id=task_id, stop_reason=ERROR, diagnostic="the row has no task", elapsed_seconds=0
            )
        task = BatchTask(
            id=task_id[:256], task=task_text, cwd=_text(row.get("cwd")), output_schema=self._schema
        )
        cwd = task_cwd(task, self._base, self._files)
        controller = CancelController()  # never fired: a row always settles
        record = await run_task(
            self._runtime.service,
            self._provider,
            task,
            cwd,
            controller.signal,
            self._budget,
            self._gate,
        )
        assert record is not None  # only a fired cancel gives None
        return record

    def close(self) -> None:
        """Close the service (no product runs between batches) and the event loop."""
        self._stack.close()

    def __enter__(self) -> Delegate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
