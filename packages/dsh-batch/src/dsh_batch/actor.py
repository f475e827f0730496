"""The actor of ``dsh batch --ray``'s pool: one composed profile, one open service, many tasks.

:class:`BatchActor` is a plain class; the driver (:mod:`dsh_batch.ray_pool`) makes it a
Ray actor with ``ray.remote`` (this module imports nothing of Ray). Ray starts the actor
in the job's ``working_dir``, the unpacked bundle: the actor composes the profile from
its copy there once (``${DSH_FILES}`` names that copy), opens one ``SubagentService`` on
an event loop of its own and keeps both for its whole life. Each :meth:`BatchActor.run`
is then one delegation on that service, returned only once the product's process tree
is gone, so between tasks no product process exists. Where the worker's environment asks
for OpenTelemetry export (the standard ``OTEL_EXPORTER_OTLP_*`` variables, as for
``dsh``), the actor exports its delegations itself and flushes them when it is closed.

The actor is threaded (two calls at a time): :meth:`BatchActor.cancel` reaches it while a
:meth:`BatchActor.run` is in progress and cancels that run, which settles like any
cancelled delegation. An actor killed mid-task (node lost, OOM killer, ``kill -9``,
``ray.kill``) leaves no product process: the products run under the host-death guard of
the actor's process, which kills their whole trees when the process dies. The actor's
process is not dumpable (:mod:`dsh_subprocess.protect`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
from anyio.from_thread import start_blocking_portal
from dsh_profiles.errors import ProfileError
from dsh_profiles.isolation import isolate
from dsh_profiles.loader import Composition
from dsh_profiles.runtime import open_runtime
from dsh_profiles.telemetry import export_requested
from dsh_profiles.warm import SERVER_WARM, warm_from_flag
from dsh_subagent import ERROR, Budget, CancelController, SubagentError, SubagentService
from dsh_subprocess import shutdown_guard_server
from dsh_subprocess.protect import protect_ray_actor_process
from dsh_worktree import Worktree, WorktreeError

from dsh_batch.engine import load_batch_profile, run_task, task_cwd
from dsh_batch.files import BatchRecord, BatchTask

__all__ = ["BUNDLE_PROFILE", "CANCEL_REASON", "BatchActor"]

BUNDLE_PROFILE: Final = ".dsh-batch/profile.toml"
"""Where the profile sits inside the shipped bundle."""

CANCEL_REASON: Final = "interrupted (dsh batch --ray)"


class _NodeFirstStartAlone:
    """:class:`~dsh_batch.engine.FirstStartAlone` across the actor processes of one node.

    The actors of a node share its unpacked bundle (and so any product home in it): a
    file lock there lets the node's first product start run alone, and a marker file
    records that one succeeded.
    """

    def __init__(self, bundle: str) -> None:
        self._lock = Path(bundle, ".dsh-batch", "first-start.lock")
        self._warm = Path(bundle, ".dsh-batch", "first-start.done")

    @asynccontextmanager
    async def _passage(self) -> AsyncIterator[None]:
        if self._warm.exists():
            yield
            return
        import fcntl  # POSIX only: imported where it is used

        fd = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
            if self._warm.exists():
                yield
                return
            yield
            self._warm.touch()
        finally:
            os.close(fd)  # releases the lock

    def passage(self) -> AbstractAsyncContextManager[None]:
        """Held around one product start."""
        return self._passage()


def _failed(task: BatchTask, diagnostic: str, started: float) -> str:
    return BatchRecord(
        id=task.id,
        stop_reason=ERROR,
        diagnostic=diagnostic,
        elapsed_seconds=round(time.monotonic() - started, 3),
    ).model_dump_json()


class BatchActor:
    """One slot of the pool (see the module doc).

    A problem composing the profile or opening the service on the node does not fail the
    actor's construction: every task it is given is then recorded failed with that
    problem, as it would be on this machine.

    Args:
        provider: The instance name every task delegates to.
        base_cwd: Base directory of relative task cwds (default: the unpacked bundle).
        budget_json: The per-task budget as JSON, or ``None``.
        worktree_json: ``--worktree`` settings as JSON (over the profile's own), or ``None``.
        confinement: ``--confinement`` (over the profile's modes), or ``None``.
    """

    _service: SubagentService
    """Set once the service is open (on the actor's event loop)."""

    # Deliberate: no method is ``async``. Ray makes a class with any coroutine method an
    # async actor, whose methods all run on one event loop: a blocking ``run`` would then
    # keep ``cancel`` from ever running. The async work is in module functions below.

    def __init__(
        self,
        provider: str,
        base_cwd: str | None,
        budget_json: str | None,
        worktree_json: str | None = None,
        confinement: str | None = None,
        warm: int | None = None,
    ) -> None:
        protect_ray_actor_process()  # before the profile's secrets are read
        self._bundle = os.getcwd()
        self._provider = provider
        self._base = base_cwd or self._bundle
        self._budget = Budget.model_validate_json(budget_json) if budget_json else None
        self._lock = threading.Lock()
        self._controller: CancelController | None = None
        self._cancelled = False
        self._problem: str | None = None
        self._gate = _NodeFirstStartAlone(self._bundle)
        self._stack = contextlib.ExitStack()
        self._export: Any = None
        self._no_export = _start_export(self)
        try:
            composition = load_batch_profile(
                Path(self._bundle, BUNDLE_PROFILE),
                self._bundle,
                confinement=confinement,
                warm=warm_from_flag(warm, SERVER_WARM),  # one task at a time per actor
            )
            if worktree_json is not None:
                composition = isolate(
                    composition, provider, Worktree.model_validate_json(worktree_json)
                )
        except ProfileError as exc:
            self._problem = f"could not load the profile on the Ray node: {exc.problems[0]}"
            return
        except WorktreeError as exc:
            self._problem = f"could not isolate on the Ray node: {exc.message}"
            return
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            self._stack.enter_context(
                self._portal.wrap_async_context_manager(_hold_runtime(self, composition))
            )
        except Exception as exc:
            self._stack.close()
            reason = exc.message if isinstance(exc, SubagentError) else type(exc).__name__
            self._problem = f"could not open the service on the Ray node: {reason}"

    def ready(self) -> bool:
        """Constructed (the driver feeds only actors that answered this)."""
        return self._problem is None

    def run(self, task_json: str) -> str | None:
        """Delegate one task; its record as JSON, ``None`` when :meth:`cancel` cancelled it."""
        started = time.monotonic()
        task = BatchTask.model_validate_json(task_json)
        if self._problem is not None:
            return _failed(task, self._problem, started)
        try:
            record = self._portal.call(_run, self, task)
        except Exception as exc:
            return _failed(task, f"internal error ({type(exc).__name__})", started)
        return record.model_dump_json() if record is not None else None

    def cancel(self) -> None:
        """Cancel the run in progress (and any later one): it settles, its tree gone."""
        with self._lock:
            self._cancelled = True
            controller = self._controller
        if controller is not None:
            self._portal.call(controller.cancel, CANCEL_REASON)

    def telemetry(self) -> str | None:
        """Why this actor exports no telemetry, or ``None`` when it does."""
        return self._no_export

    def close(self) -> None:
        """Close the service, flush telemetry, end the event loop and the guard server.

        The guard server would otherwise end only once it sees this process die, a
        moment after ``ray.kill`` (which does not wait): it is gone before this returns.
        """
        try:
            self._stack.close()
        finally:
            if self._export is not None:
                self._export.close()  # what is pending goes out before the actor is killed
                self._export = None
            shutdown_guard_server()


def _start_export(actor: BatchActor) -> str | None:
    """Export the actor's delegations when its environment asks for it (as ``dsh`` does).

    Returns why nothing is exported, or ``None``. The environment is the worker's: the
    one the node's Ray was started with (dsh never ships the driver's).
    """
    if not export_requested():
        return (
            "the OTEL_EXPORTER_OTLP_* variables are not set where the node's Ray runs "
            "(dsh never ships the driver's environment)"
        )
    try:
        from dsh_otel import configure_from_environment

        actor._export = configure_from_environment()  # imports the SDK and its exporter
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in {"dsh_otel", "opentelemetry"}:
            raise
        return "dsh-otel is not installed on the Ray node (pip install 'dsh-batch[otel]')"
    return None


@asynccontextmanager
async def _hold_runtime(actor: BatchActor, composition: Composition) -> AsyncIterator[None]:
    async with open_runtime(composition) as runtime:
        actor._service = runtime.service
        runtime.service.keep_ready(actor._provider, actor._base)  # the tasks' default cwd
        yield


async def _run(actor: BatchActor, task: BatchTask) -> BatchRecord | None:
    controller = CancelController()
    with actor._lock:
        if actor._cancelled:
            return None
        actor._controller = controller
    try:
        cwd = task_cwd(task, actor._base, actor._bundle)
        return await run_task(
            actor._service,
            actor._provider,
            task,
            cwd,
            controller.signal,
            actor._budget,
            actor._gate,
        )
    finally:
        with actor._lock:
            actor._controller = None
