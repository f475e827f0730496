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

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import DshProfilesError, UsageError
from dsh_subagent import Budget, CancelSignal, SubagentError
from dsh_subagent.structured import check_output_schema
from dsh_subprocess import ConfinementMode
from dsh_worktree import Worktree
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

from dsh_batch.engine import (
    FILES_PLACEHOLDER,
)
from dsh_batch.events import BatchObserver
from dsh_batch.files import BatchRecord, BatchTask, ResultsFile, describe_error
from dsh_batch.prepare import Wording, check_places, load_setup
from dsh_batch.runner import BatchRun

__all__ = ["BatchFailedError", "BatchSettings", "run_batch"]

_WORDING = Wording(
    files="run_batch: field 'files':",
    cwd="run_batch: field 'cwd':",
    ray_cwd="run_batch: field 'cwd': with ray, an absolute path on the nodes",
    out="run_batch: field 'out':",
    output_schema="run_batch: field 'output_schema'",
    worktree="run_batch: field 'worktree': ",
    no_files=f"run_batch: a task cwd uses {FILES_PLACEHOLDER}: give files=",
)


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
    handle_signals: bool = False,
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
        handle_signals: Also stop at SIGINT or SIGTERM, as ``cancel`` does (main thread
            only; on Ray a second signal kills the actors running tasks). Off by
            default: a library leaves its host's signal handlers alone.
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
    on_ray = settings.ray is not False
    places = check_places(
        settings.files,
        settings.cwd,
        on_ray=on_ray,
        out=settings.out,
        tasks_path=None,
        profile=settings.profile,
        wording=_WORDING,
    )
    setup = load_setup(
        settings.profile,
        settings.target,
        todo_all,
        places,
        wording=_WORDING,
        instance=settings.instance,
        output_schema=settings.output_schema,
        budget=settings.budget,
        concurrency=settings.concurrency,
        retry_failed=settings.retry_failed,
        confinement=settings.confinement,
        warm=settings.warm,
        worktree=None if settings.worktree is None else lambda _c, _p: settings.worktree,
        ray=settings.ray,
        ray_retries=settings.ray_retries,
        discovery=discovery,
        tasks_name="run_batch tasks",
    )
    file = ResultsFile(settings.out) if settings.out is not None else None
    with BatchRun(setup, file) as batch:
        batch.check()
        summary = batch.run(observer=observer, cancel=cancel, handle_signals=handle_signals)
        latest = batch.latest
        records = [latest[task.id] for task in todo_all if task.id in latest]
    if summary.error is not None:
        raise BatchFailedError(summary.error, records)
    return records
