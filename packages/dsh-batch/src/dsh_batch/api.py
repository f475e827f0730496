"""``run_batch``: a batch from Python, the records back.

The same engine as ``dsh batch``: everything that can be checked is checked before the
first task (the settings, every task, the profile and the target, the results path,
every task's workspace here), and a problem is one :class:`~dsh_profiles.errors.UsageError`
(or :class:`~dsh_profiles.errors.ProfileError`) naming the bad field, with nothing started
and nothing recorded. With ``out`` the records are appended to that results file as
tasks settle, under its lock, and a second call with the same file resumes (the latest
record per id counts). The call returns once every product's process tree is gone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import anyio
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import DshProfilesError, UsageError
from dsh_profiles.isolation import check_branch_count, check_isolation, isolate
from dsh_profiles.options import resolve_target
from dsh_profiles.warm import batch_warm
from dsh_subagent import Budget, CancelController, CancelSignal, SubagentError
from dsh_subagent.structured import check_output_schema
from dsh_subprocess import ConfinementMode
from dsh_worktree import MAX_WARM, Worktree, WorktreeError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    NonNegativeInt,
    PositiveInt,
    StringConstraints,
    ValidationError,
)

from dsh_batch.checks import check_base, check_out_path, check_task_cwds
from dsh_batch.engine import (
    FILES_PLACEHOLDER,
    BatchPlan,
    Interrupts,
    RecordSink,
    Summary,
    default_concurrency,
    load_batch_profile,
    select_tasks,
    task_cwd,
)
from dsh_batch.events import BatchObserver
from dsh_batch.files import BatchRecord, BatchTask, ResultsFile, describe_error
from dsh_batch.local import run_local
from dsh_batch.schema import typed_row_schema

__all__ = ["BatchFailedError", "BatchSettings", "run_batch"]


class BatchSettings(BaseModel):
    """How :func:`run_batch` runs a batch (the keyword arguments, validated together).

    Attributes:
        profile: The TOML profile.
        target: A tool name of the profile, or an instance name.
        instance: Treat ``target`` as an instance name only.
        out: The results file (JSON Lines, appended; resumed when it holds records), or
            ``None``: the records are only returned.
        concurrency: Runs at a time (default: the CPU count here; the cluster's with Ray).
        cwd: Base directory of relative task cwds and the cwd of tasks without one
            (default: the current directory; with Ray an absolute path on the nodes,
            default the shipped files directory).
        files: The directory ``${DSH_FILES}`` names (shipped to every node with Ray).
        output_schema: A JSON Schema (object root) for every task without its own.
        budget: Per-task run budget (it only tightens the instance's own).
        retry_failed: Also run the tasks whose latest record in ``out`` is not completed.
        confinement: A confinement mode over the profile's.
        warm: Ready products per instance (default ``min(concurrency, 4)``).
        worktree: Run each task in its own git worktree (over the profile's setting).
        ray: ``False`` here; ``True`` on Ray's default cluster; a string: its address.
        ray_retries: With Ray, times a task starts again when its actor dies mid-task.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    profile: Path
    target: Annotated[str, StringConstraints(min_length=1)]
    instance: bool = False
    out: Path | None = None
    concurrency: PositiveInt | None = None
    cwd: Path | None = None
    files: Path | None = None
    output_schema: dict[str, JsonValue] | None = None
    budget: Budget | None = None
    retry_failed: bool = False
    confinement: ConfinementMode | None = None
    warm: NonNegativeInt | None = None
    worktree: Worktree | None = None
    ray: bool | Annotated[str, StringConstraints(min_length=1)] = False
    ray_retries: NonNegativeInt = Field(default=0)


class BatchFailedError(DshProfilesError):
    """The batch failed outside its tasks (Ray unreachable, the runtime could not open).

    Attributes:
        records: The records of the tasks that settled before it failed (also in ``out``).
        reason: One safe line saying why.
    """

    def __init__(self, reason: str, records: list[BatchRecord]) -> None:
        super().__init__(f"the batch failed: {reason}")
        self.reason = reason
        self.records = records


class _Kept:
    """The records of a batch without a results file."""

    def __init__(self) -> None:
        self.latest: dict[str, BatchRecord] = {}

    def append(self, record: BatchRecord) -> None:
        self.latest[record.id] = record


def _settings(options: Mapping[str, Any]) -> BatchSettings:
    try:
        return BatchSettings.model_validate(options)
    except ValidationError as exc:
        raise UsageError(f"run_batch: {describe_error(exc)}") from None


def _tasks(tasks: Iterable[BatchTask | Mapping[str, Any]]) -> tuple[BatchTask, ...]:
    checked: list[BatchTask] = []
    seen: dict[str, int] = {}
    if isinstance(tasks, str | bytes | Mapping):
        raise UsageError("run_batch: tasks must be a list of tasks, not one string or mapping")
    for index, item in enumerate(tasks):
        where = f"run_batch: tasks[{index}]"
        if isinstance(item, BatchTask):
            task = item
        elif not isinstance(item, Mapping):
            raise UsageError(f"{where}: must be a mapping of the task file's fields or a BatchTask")
        else:
            try:
                task = BatchTask.model_validate(item)
            except ValidationError as exc:
                raise UsageError(f"{where}: {describe_error(exc)}") from None
        if not task.task.strip():
            raise UsageError(f"{where}: field 'task' is blank")
        if task.output_schema is not None:
            try:
                check_output_schema(task.output_schema)
            except SubagentError as exc:
                raise UsageError(f"{where}: field 'output_schema': {exc.message}") from None
        if task.id in seen:
            raise UsageError(f"{where}: duplicate id {task.id!r} (first at tasks[{seen[task.id]}])")
        seen[task.id] = index
        checked.append(task)
    return tuple(checked)


def run_batch(
    tasks: Iterable[BatchTask | Mapping[str, Any]],
    *,
    observer: BatchObserver | None = None,
    cancel: CancelSignal | None = None,
    discovery: ProviderDiscovery | None = None,
    **options: Any,
) -> list[BatchRecord]:
    """Run every task on one provider instance; the latest record of each task, in order.

    Args:
        tasks: :class:`BatchTask` values or mappings with the task file's fields
            (``id``, ``task``, optional ``cwd`` and ``output_schema``).
        observer: Called with each progress event (:mod:`dsh_batch.events`).
        cancel: Stops the batch: runs in progress are cancelled and not recorded, and
            the call returns what settled (the missing tasks run again on resume).
        discovery: Where provider types come from (default: installed entry points).
        **options: The fields of :class:`BatchSettings` (``profile`` and ``target`` are
            required).

    Returns:
        One record per task that has one (a task cancelled by ``cancel`` has none), in
        the order of ``tasks``; with ``out``, records already in the file count.

    Raises:
        UsageError: a bad setting or task (named), a check before the first task failed,
            or another batch holds ``out``; nothing started, nothing recorded.
        ProfileError: the profile is invalid.
        BatchFailedError: the batch failed outside its tasks.
    """
    settings = _settings(options)
    todo_all = _tasks(tasks)
    files: str | None = None
    if settings.files is not None:
        files = os.path.abspath(settings.files)
        if not os.path.isdir(files):
            raise UsageError(
                f"run_batch: field 'files': {str(settings.files)!r} is not a directory"
            )
    on_ray = settings.ray is not False
    cwd = None if settings.cwd is None else str(settings.cwd)
    base: str | None = None
    if not on_ray:
        base = check_base(cwd, name="run_batch: field 'cwd':")
    elif cwd is not None and not os.path.isabs(cwd):
        raise UsageError("run_batch: field 'cwd': with ray, an absolute path on the nodes")
    if settings.out is not None:
        check_out_path(
            str(settings.out), None, str(settings.profile), name="run_batch: field 'out':"
        )
    concurrency = settings.concurrency or default_concurrency()
    composition = load_batch_profile(
        settings.profile,
        files,
        discovery=discovery,
        confinement=settings.confinement,
        warm=batch_warm(settings.warm, concurrency),
    )
    provider = resolve_target(composition, settings.target, settings.instance)
    schema = settings.output_schema
    if schema is None:
        schema = typed_row_schema(composition, settings.target, settings.instance)
    elif (problem := _schema_problem(schema)) is not None:
        raise UsageError(f"run_batch: field 'output_schema': {problem}")
    if schema is not None:
        todo_all = tuple(
            task
            if task.output_schema is not None
            else task.model_copy(update={"output_schema": schema})
            for task in todo_all
        )
    worktree = settings.worktree
    if worktree is not None and not on_ray:
        if "warm" not in worktree.model_fields_set:  # a pool as large as the concurrency
            worktree = worktree.model_copy(update={"warm": min(concurrency, MAX_WARM)})
        try:
            composition = isolate(composition, provider, worktree)
        except WorktreeError as exc:
            raise UsageError(f"run_batch: field 'worktree': {exc.message}") from None
    isolation = worktree if worktree is not None else composition.provider(provider).worktree
    file = ResultsFile(settings.out) if settings.out is not None else None
    sink: RecordSink
    kept = _Kept()
    if file is not None:
        file.open()  # the lock is held from here to the end of the batch
        sink = file
    else:
        sink = kept
    try:
        todo = (
            select_tasks(todo_all, file, retry_failed=settings.retry_failed)
            if file is not None
            else todo_all
        )
        if files is None and any(FILES_PLACEHOLDER in (task.cwd or "") for task in todo):
            raise UsageError(f"run_batch: a task cwd uses {FILES_PLACEHOLDER}: give files=")
        check_branch_count(isolation, len(todo))
        if base is not None:
            cwds = [(task, task_cwd(task, base, files)) for task in todo]
            check_task_cwds(cwds, {}, "run_batch tasks")
            check_isolation(composition, provider, (c for _, c in cwds))
        summary = Summary(0, 0, False, 0)
        if todo and on_ray:
            from dsh_batch.ray_pool import check_ray, run_on_ray

            address = settings.ray if isinstance(settings.ray, str) else None
            check_ray(address)
            summary = run_on_ray(
                address,
                profile=settings.profile,
                files=files,
                plan=BatchPlan(todo, provider, settings.budget, settings.concurrency or 0),
                base_cwd=cwd,
                retries=settings.ray_retries,
                results=sink,
                observer=observer,
                interrupts=Interrupts(),
                cancel=cancel,
                worktree=worktree,
                confinement=settings.confinement,
                warm=settings.warm,
            )
        elif todo:
            assert base is not None
            plan = BatchPlan(todo, provider, settings.budget, concurrency)
            signal = cancel if cancel is not None else CancelController().signal
            summary = anyio.run(run_local, composition, plan, base, files, sink, signal, observer)
        latest = file.latest if file is not None else kept.latest
        records = [latest[task.id] for task in todo_all if task.id in latest]
        if summary.error is not None:
            raise BatchFailedError(summary.error, records)
        return records
    finally:
        if file is not None:
            file.close()


def _schema_problem(schema: dict[str, JsonValue]) -> str | None:
    try:
        check_output_schema(schema)
    except SubagentError as exc:
        return exc.message
    return None
