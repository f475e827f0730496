"""A batch on Ray (``dsh batch --ray``, ``run_batch(ray=...)``): a pool of warm Ray actors (the
``ray`` extra).

The driver (the ``dsh`` process) validates the profile, then ships a *bundle* to the
cluster through Ray's runtime environment (``working_dir``): a copy of ``--files DIR``
with the profile inside it. It starts a pool of ``--concurrency`` actors (default: the
cluster's CPUs), one CPU each (:class:`~dsh_batch.actor.BatchActor`): each composes
the profile from its unpacked copy of the bundle once (``${DSH_FILES}`` names that copy,
so nothing depends on paths that exist only on the head node) and keeps one
``SubagentService`` open for its life. The driver hands a task to an actor only once the
actor is constructed and idle, so a task starts on its actor the moment it is handed
over, and appends each record to the results file as it arrives. Actors Ray cannot
place (more than the cluster's free CPUs) simply get no task until they are placed.

Every node needs ``dsh-batch[ray]`` and the provider distributions the profile uses
installed in the Python environment Ray runs. Credentials are never shipped: a
profile's ``pass_env`` reads the environment of the worker (set it where the node's Ray
is started, or through your cluster's secret mechanism).

An actor killed mid-task (node lost, OOM killer, ``kill -9``) leaves no product process:
the products run under the host-death guard of the actor's process, which kills their
whole trees when it dies. The task is then recorded as failed with the time from its
start to the moment the driver learnt of the death, or handed to another actor again
from scratch ``--ray-retries`` times first; a new actor takes the dead one's place and
the other tasks go on.

With the OpenTelemetry variables set, each actor exports its own delegations (its
environment is the node's Ray's); where the first actor cannot, one line says why.

Ctrl-C cancels the run in progress on every actor (its tree gone before it returns); a
second Ctrl-C kills those actors instead (their guards remove the products). When the
batch ends every actor is closed and killed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dsh_profiles.errors import UsageError
from dsh_profiles.profile import read_profile
from dsh_profiles.telemetry import export_requested
from dsh_subagent import ERROR, CancelSignal
from dsh_worktree import Worktree

from dsh_batch.actor import BUNDLE_PROFILE, BatchActor
from dsh_batch.engine import BatchPlan, Interrupts, RecordSink, Summary
from dsh_batch.events import (
    BatchCounts,
    BatchEvent,
    BatchObserver,
    Notice,
    TaskLeft,
    TaskSettled,
    TaskStarted,
)
from dsh_batch.files import BatchRecord, BatchTask
from dsh_batch.ray_cluster import RayUnavailableError, connect_ray, import_ray, one_line

__all__ = ["BUNDLE_PROFILE", "check_ray", "import_ray", "run_on_ray"]

_POLL_SECONDS: Final = 0.2
"""How often the driver looks at Ctrl-C while it waits for Ray."""

_CLOSE_SECONDS: Final = 60.0
"""How long the driver waits for the actors to close their services at the end."""

_PROBE_SECONDS: Final = 10.0
"""How long the driver tries to open a TCP connection to the cluster's address."""


def _stage_bundle(stage: Path, profile: Path, files: str | None) -> None:
    if files is not None:
        shutil.copytree(files, stage, dirs_exist_ok=True)
    target = stage / BUNDLE_PROFILE
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(profile, target)


def check_ray(address: str | None) -> None:
    """Ray is installed and ``address`` (when it is ``host:port``) accepts connections.

    ``ray.init`` retries an unreachable address for many minutes; a TCP connect first
    turns a typo or a cluster that is down into one line at once, before anything starts.

    Raises:
        UsageError: Ray is not installed, or nothing listens at ``address``.
    """
    import_ray()
    if address is None:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_SECONDS):
            return
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"could not reach Ray at {address}: {reason}") from None


def _with_host_output(observer: BatchObserver | None) -> BatchObserver | None:
    """``observer`` called with the host's own ``sys.stdout`` and ``sys.stderr``.

    While Ray is connected its driver-side prints are redirected to logging
    (:func:`~dsh_batch.ray_cluster.ray_output_as_logging`); the host's observer runs on
    the calling thread in that block, and what it prints is the host's, not Ray's.
    """
    if observer is None:
        return None
    out, err = sys.stdout, sys.stderr
    host = observer

    def deliver(event: BatchEvent) -> None:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            host(event)

    return deliver


def run_on_ray(
    address: str | None,
    *,
    profile: Path,
    files: str | None,
    plan: BatchPlan,
    base_cwd: str | None,
    retries: int,
    results: RecordSink,
    observer: BatchObserver | None = None,
    interrupts: Interrupts | None = None,
    cancel: CancelSignal | None = None,
    worktree: Worktree | None = None,
    confinement: str | None = None,
    warm: int | None = None,
) -> Summary:
    """Run ``plan`` on the Ray cluster at ``address`` (``None``: Ray's own default).

    ``worktree``: ``--worktree`` settings every actor isolates its instance with;
    ``confinement``: the ``--confinement`` mode every actor composes the profile with;
    ``warm``: ``--warm``, each actor's ready products (``None``: the actor's default).
    Progress goes to ``observer`` as events. The first request in ``interrupts`` (or
    ``cancel`` firing) cancels the run in progress on every actor; a second request kills
    those actors. No signal handler is installed: the caller feeds ``interrupts``.

    Raises:
        UsageError: Ray is not installed.
    """
    observer = _with_host_output(observer)  # taken before Ray's output is redirected
    with tempfile.TemporaryDirectory(prefix="dsh-batch-") as stage:
        _stage_bundle(Path(stage), profile, files)
        try:
            passed = {name for row in read_profile(profile).providers for name in row.pass_env}
            with connect_ray(address, {"working_dir": stage}, passed) as ray:
                pool = _Pool(ray, plan, base_cwd, retries, worktree, confinement, warm)
                return pool.drive(results, observer, interrupts or Interrupts(), cancel)
        except RayUnavailableError as exc:
            return Summary(0, 0, False, len(plan.tasks), f"could not reach Ray: {exc}")
        except KeyboardInterrupt:  # Ctrl-C while Ray was starting: nothing ran
            return Summary(0, 0, True, len(plan.tasks))


@dataclass
class _Job:
    task: BatchTask
    ref: Any
    started: float
    """When the task was handed to its (constructed, idle) actor: its start there."""


@dataclass
class _Slot:
    """One actor of the pool: constructing (``ready`` set), idle, or running ``job``."""

    actor: Any
    ready: Any | None
    job: _Job | None = None


class _Pool:
    """The driver's side of the actor pool (see the module doc)."""

    def __init__(
        self,
        ray: Any,
        plan: BatchPlan,
        base_cwd: str | None,
        retries: int,
        worktree: Worktree | None,
        confinement: str | None = None,
        warm: int | None = None,
    ) -> None:
        self._ray = ray
        self._plan = plan
        self._retries = retries
        self._actor_class = ray.remote(BatchActor).options(
            num_cpus=1, max_concurrency=2, max_restarts=0, max_task_retries=0
        )
        budget = plan.budget.model_dump_json() if plan.budget is not None else None
        settings = worktree.model_dump_json(exclude_unset=True) if worktree else None
        self._args = (plan.provider, base_cwd, budget, settings, confinement, warm)
        size = plan.concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._slots = [self._new_slot() for _ in range(min(size, len(plan.tasks)))]
        self._queue = deque(plan.tasks)
        self._attempts: Counter[str] = Counter()
        self._interrupts = Interrupts()
        self._cancel: CancelSignal | None = None
        self._start_problem: str | None = None
        self._start_failure: str | None = None
        self._ask_telemetry = export_requested()  # this environment asks for export

    def _new_slot(self) -> _Slot:
        actor = self._actor_class.remote(*self._args)
        return _Slot(actor, actor.ready.remote())

    def drive(
        self,
        results: RecordSink,
        observer: BatchObserver | None,
        interrupts: Interrupts,
        cancel: CancelSignal | None,
    ) -> Summary:
        self._interrupts, self._cancel = interrupts, cancel
        counts = BatchCounts(len(self._plan.tasks), observer)
        try:
            self._loop(results, counts)
            return Summary(
                done=counts.done,
                failed=counts.failed,
                interrupted=self._interrupted,
                not_run=len(self._plan.tasks) - counts.settled,
                error=self._start_failure,
            )
        finally:
            self._shut_down()

    @property
    def _interrupted(self) -> bool:
        return self._interrupts.count > 0

    def _loop(self, results: RecordSink, counts: BatchCounts) -> None:
        handled = 0
        while True:
            if self._cancel is not None and self._cancel.aborted and not self._interrupted:
                self._interrupts.request("cancelled")
            if self._interrupts.count > handled:
                self._escalate(handled, self._interrupts.last or "interrupted", counts)
                handled = self._interrupts.count
            if not self._interrupted:
                self._dispatch(counts)
            waiting: dict[Any, _Slot] = {}
            for slot in self._slots:
                if slot.job is not None:
                    waiting[slot.job.ref] = slot
                elif slot.ready is not None and not self._interrupted:
                    waiting[slot.ready] = slot
            if not any(slot.job for slot in self._slots) and (self._interrupted or not self._queue):
                return
            if not waiting:  # tasks left, and no actor that could ever take them
                problem = self._start_problem or "no Ray actor of the pool could be started"
                self._start_failure = problem
                return
            ready, _ = self._ray.wait(list(waiting), num_returns=1, timeout=_POLL_SECONDS)
            for ref in ready:
                slot = waiting[ref]
                if slot.job is not None and slot.job.ref == ref:
                    self._finished(slot, results, counts)
                else:
                    self._constructed(slot, counts)

    def _dispatch(self, counts: BatchCounts) -> None:
        for slot in self._slots:
            if not self._queue:
                return
            if slot.ready is None and slot.job is None:
                task = self._queue.popleft()
                ref = slot.actor.run.remote(task.model_dump_json())
                slot.job = _Job(task, ref, time.monotonic())
                counts.emit(TaskStarted(task.id))

    def _constructed(self, slot: _Slot, counts: BatchCounts) -> None:
        ray = self._ray
        try:
            ray.get(slot.ready)
        except ray.exceptions.RayError as exc:
            # Never constructed (its runtime environment failed, no node can host it):
            # dropped, not replaced; the batch fails only when no actor is left.
            self._start_problem = f"a Ray actor of the pool could not start: {one_line(exc)}"
            ray.kill(slot.actor, no_restart=True)
            self._slots.remove(slot)
            return
        slot.ready = None  # a node that could not compose the profile records that per task
        if self._ask_telemetry:  # the actors export themselves; one line if they cannot
            self._ask_telemetry = False
            reason = ray.get(slot.actor.telemetry.remote())
            if reason is not None:
                counts.emit(Notice(f"warning: the Ray actors export no telemetry: {reason}"))

    def _finished(self, slot: _Slot, results: RecordSink, counts: BatchCounts) -> None:
        ray = self._ray
        job = slot.job
        assert job is not None
        slot.job = None
        interrupted = self._interrupted
        try:
            value = ray.get(job.ref)
        except ray.exceptions.RayActorError as exc:
            name = type(exc).__name__
            retry = not interrupted and self._attempts[job.task.id] < self._retries
            if retry:
                self._attempts[job.task.id] += 1
                self._queue.appendleft(job.task)
                attempt = self._attempts[job.task.id] + 1
                counts.emit(
                    Notice(
                        f"{job.task.id}: the Ray actor running it died ({name}); running it "
                        f"again from scratch (attempt {attempt} of {self._retries + 1})"
                    )
                )
            self._replace(slot)
            if interrupted or retry:
                counts.emit(TaskLeft(job.task.id))
                return
            attempts = f"{self._retries + 1} attempts" if self._retries else "--ray-retries 0"
            record = _failed(job, f"the Ray actor running this task died ({name}; {attempts})")
        except ray.exceptions.RayError as exc:
            if interrupted:
                counts.emit(TaskLeft(job.task.id))
                return
            record = _failed(job, f"the Ray actor raised {type(exc).__name__}")
        else:
            if value is None:  # cancelled: not recorded, runs again on resume
                counts.emit(TaskLeft(job.task.id))
                return
            record = BatchRecord.model_validate_json(value)
        results.append(record)
        counts.emit(TaskSettled(record))

    def _replace(self, slot: _Slot) -> None:
        """A new actor in a dead one's place while tasks are left (its products went with it)."""
        self._ray.kill(slot.actor, no_restart=True)
        if self._interrupted or not self._queue:
            self._slots.remove(slot)
            return
        replacement = self._new_slot()
        slot.actor, slot.ready = replacement.actor, replacement.ready

    def _escalate(self, handled: int, name: str, counts: BatchCounts) -> None:
        running = [slot for slot in self._slots if slot.job is not None]
        if handled == 0:
            counts.emit(
                Notice(
                    f"{name}: cancelling {len(running)} running task(s) on Ray; waiting for "
                    "every product to exit (again to kill the actors)"
                )
            )
            for slot in running:
                slot.actor.cancel.remote()
        elif handled == 1:
            counts.emit(Notice(f"{name}: killing the Ray actors; their guards remove the products"))
            for slot in running:
                self._ray.kill(slot.actor, no_restart=True)
        else:
            counts.emit(Notice("still cancelling; waiting for Ray to report every task"))

    def _shut_down(self) -> None:
        """Close every constructed actor's service, then kill every actor of the pool."""
        ray = self._ray
        idle = [slot for slot in self._slots if slot.ready is None and slot.job is None]
        closing = [slot.actor.close.remote() for slot in idle]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=_CLOSE_SECONDS)
        for slot in self._slots:
            ray.kill(slot.actor, no_restart=True)
        self._slots.clear()


def _failed(job: _Job, diagnostic: str) -> BatchRecord:
    elapsed = round(time.monotonic() - job.started, 3)
    return BatchRecord(
        id=job.task.id, stop_reason=ERROR, diagnostic=diagnostic, elapsed_seconds=elapsed
    )
