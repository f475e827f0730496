"""A loaded batch from its results file's lock to its summary: the one path ``run_batch`` and
``dsh batch`` share once the profile is loaded and the target resolved.

:class:`BatchRun` holds the results file under its exclusive lock for the whole batch
and chooses the tasks to run (the latest record per id counts; see
:func:`~dsh_batch.engine.select_tasks`); :meth:`BatchRun.check` makes the checks that
need that choice (a ``${DSH_FILES}`` cwd without files, one branch name for many tasks,
every task's workspace here); :meth:`BatchRun.run` runs the tasks here or on Ray and
returns the summary. Ctrl-C and SIGTERM cancel the batch only with
``handle_signals=True`` (see :mod:`dsh_profiles.signals`).
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType

import anyio
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import check_branch_count, check_isolation
from dsh_profiles.loader import Composition
from dsh_profiles.signals import cancellation
from dsh_subagent import Budget, CancelSignal
from dsh_worktree import Worktree

from dsh_batch.checks import check_task_cwds
from dsh_batch.engine import (
    FILES_PLACEHOLDER,
    BatchPlan,
    Interrupts,
    RecordSink,
    Summary,
    default_concurrency,
    select_tasks,
    task_cwd,
)
from dsh_batch.events import BatchCounts, BatchEvent, BatchObserver, Notice
from dsh_batch.files import BatchRecord, BatchTask, ResultsFile
from dsh_batch.local import run_local

__all__ = ["BatchRun", "BatchSetup", "RaySetup"]


@dataclass(frozen=True)
class RaySetup:
    """How a batch runs on Ray (see :func:`dsh_batch.ray_pool.run_on_ray`).

    Attributes:
        address: The cluster (``None``: Ray's own default).
        base_cwd: The base directory of task cwds on the nodes.
        retries: Times a task starts again when its actor dies mid-task.
        worktree: The isolation every actor applies on its node.
        confinement: The confinement mode every actor composes the profile with.
        warm: Each actor's ready products (``None``: the actor's default).
    """

    address: str | None
    base_cwd: str | None
    retries: int = 0
    worktree: Worktree | None = None
    confinement: str | None = None
    warm: int | None = None


@dataclass(frozen=True)
class BatchSetup:
    """A batch decided before its results file is opened (profile loaded, target found).

    Attributes:
        composition: The loaded profile, isolated as asked (here).
        provider: The instance every task runs on.
        tasks: Every task, schemas folded in.
        profile: The profile's path (a Ray actor loads it again on its node).
        base: The base directory of task cwds here; ``None`` on Ray.
        files: The directory ``${DSH_FILES}`` names.
        no_files: The usage error when a task cwd names ``${DSH_FILES}`` without files.
        budget: Per-task run budget.
        concurrency: Runs at a time (``None``: the CPU count here; the cluster's on Ray).
        retry_failed: Also run the tasks whose latest record is not completed.
        ray: On Ray (``None``: here).
        isolation: The worktree settings the tasks run with (their branch count is checked).
        line_of: The task file's line of each id (for messages).
        tasks_name: The task file as the user named it (for messages).
    """

    composition: Composition
    provider: str
    tasks: tuple[BatchTask, ...]
    profile: Path
    base: str | None
    files: str | None
    no_files: str
    budget: Budget | None = None
    concurrency: int | None = None
    retry_failed: bool = False
    ray: RaySetup | None = None
    isolation: Worktree | None = None
    line_of: Mapping[str, int] = field(default_factory=dict)
    tasks_name: str = "the tasks"


class _Kept:
    """The records of a batch without a results file."""

    def __init__(self) -> None:
        self.latest: dict[str, BatchRecord] = {}

    def append(self, record: BatchRecord) -> None:
        self.latest[record.id] = record


class BatchRun:
    """One batch, its results file locked from ``with`` to its end.

    Args:
        setup: What the batch runs.
        results: The results file (appended; its records decide what runs), or ``None``:
            the records are only kept in :attr:`latest`.
    """

    def __init__(self, setup: BatchSetup, results: ResultsFile | None) -> None:
        self.setup = setup
        self.results = results
        self._kept = _Kept()
        self.todo: tuple[BatchTask, ...] = setup.tasks

    def __enter__(self) -> BatchRun:
        if self.results is not None:
            self.results.open()  # the lock is held from here to the end of the batch
            self.todo = select_tasks(
                self.setup.tasks, self.results, retry_failed=self.setup.retry_failed
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.results is not None:
            self.results.close()

    @property
    def skipped(self) -> int:
        """Tasks left out because of their records in the results file."""
        return len(self.setup.tasks) - len(self.todo)

    @property
    def again(self) -> int:
        """Tasks that run again although they have a record (``retry_failed``)."""
        recorded = self.results.done if self.results is not None else frozenset()
        return sum(1 for task in self.todo if task.id in recorded)

    @property
    def skipped_failed(self) -> int:
        """Skipped tasks whose latest record is not completed (``retry_failed`` runs them)."""
        if self.results is None or self.setup.retry_failed:
            return 0
        failed = self.results.done - self.results.completed
        return sum(1 for task in self.setup.tasks if task.id in failed)

    @property
    def latest(self) -> Mapping[str, BatchRecord]:
        """The latest record of each id (with a results file: its records too)."""
        return self.results.latest if self.results is not None else self._kept.latest

    def check(self) -> None:
        """The checks that need the chosen tasks; nothing is started or recorded on failure.

        Raises:
            UsageError: a task cwd names ``${DSH_FILES}`` without files, one branch name
                for many tasks, a task's workspace is missing here or cannot be isolated,
                Ray is not installed or not reachable (when there is something to run).
        """
        setup = self.setup
        if setup.files is None and any(FILES_PLACEHOLDER in (t.cwd or "") for t in self.todo):
            raise UsageError(setup.no_files)
        check_branch_count(setup.isolation, len(self.todo))
        if setup.base is not None:  # on Ray, task cwds are paths on the nodes
            cwds = [(task, task_cwd(task, setup.base, setup.files)) for task in self.todo]
            check_task_cwds(cwds, setup.line_of, setup.tasks_name)
            check_isolation(setup.composition, setup.provider, (cwd for _, cwd in cwds))
        if setup.ray is not None and self.todo:
            from dsh_batch.ray_pool import check_ray

            check_ray(setup.ray.address)

    def run(
        self,
        *,
        observer: BatchObserver | None = None,
        cancel: CancelSignal | None = None,
        handle_signals: bool = False,
    ) -> Summary:
        """Run the chosen tasks; the summary once every product's process tree is gone.

        Args:
            observer: Called with each progress event (:mod:`dsh_batch.events`).
            cancel: Stops the batch: runs in progress are cancelled and not recorded.
            handle_signals: Also stop on SIGINT and SIGTERM (main thread only); on Ray a
                second signal kills the actors running tasks.
        """
        if not self.todo:  # nothing to run: connect to nothing, start nothing
            return Summary(0, 0, False, 0)
        sink: RecordSink = self.results if self.results is not None else self._kept
        setup = self.setup
        if setup.ray is not None:
            return self._on_ray(setup.ray, sink, observer, cancel, handle_signals)
        assert setup.base is not None
        concurrency = setup.concurrency or default_concurrency()
        plan = BatchPlan(self.todo, setup.provider, setup.budget, concurrency)
        return anyio.run(
            functools.partial(
                _run_here, setup, plan, setup.base, sink, observer, cancel, handle_signals
            )
        )

    def _on_ray(
        self,
        ray: RaySetup,
        sink: RecordSink,
        observer: BatchObserver | None,
        cancel: CancelSignal | None,
        handle_signals: bool,
    ) -> Summary:
        from dsh_batch.ray_pool import run_on_ray

        setup = self.setup
        interrupts = Interrupts()
        with _signals_to(interrupts) if handle_signals else nullcontext():
            return run_on_ray(
                ray.address,
                profile=setup.profile,
                files=setup.files,
                plan=BatchPlan(self.todo, setup.provider, setup.budget, setup.concurrency or 0),
                base_cwd=ray.base_cwd,
                retries=ray.retries,
                results=sink,
                observer=observer,
                interrupts=interrupts,
                cancel=cancel,
                worktree=ray.worktree,
                confinement=ray.confinement,
                warm=ray.warm,
            )


@contextmanager
def _signals_to(interrupts: Interrupts) -> Iterator[None]:
    """SIGINT and SIGTERM become requests in ``interrupts`` while the Ray pool runs (the
    pool is synchronous, so a handler, not a receiver); the previous handlers come back."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        interrupts.request(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def _run_here(
    setup: BatchSetup,
    plan: BatchPlan,
    base: str,
    sink: RecordSink,
    observer: BatchObserver | None,
    cancel: CancelSignal | None,
    handle_signals: bool,
) -> Summary:
    """The local runner, cancelled by ``cancel`` and, when asked, by SIGINT and SIGTERM."""
    counts = BatchCounts(len(plan.tasks), observer)

    def notify(text: str) -> None:
        counts.emit(Notice(text))

    def emit(event: BatchEvent) -> None:
        counts.emit(event)

    async with cancellation(
        cancel,
        handle_signals=handle_signals,
        notify=notify,
        first=lambda name: (
            f"{name}: cancelling {counts.running} running task(s); "
            "waiting for every product to exit"
        ),
        again="still cancelling; waiting for every product to exit",
    ) as controller:
        return await run_local(
            setup.composition, plan, base, setup.files, sink, controller.signal, emit
        )
