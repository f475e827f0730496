"""``dsh batch --ray``: the same batch, each task in a Ray worker (the ``ray`` extra).

The driver (the ``dsh`` process) validates the profile, then ships a *bundle* to the
cluster through Ray's runtime environment (``working_dir``): a copy of ``--files DIR``
with the profile inside it. Each task runs as one Ray task: the worker composes the
profile from its unpacked copy of the bundle (``${DSH_FILES}`` names that copy, so
nothing depends on paths that exist only on the head node), opens its own
``SubagentService``, delegates, disposes, and returns the record, which the driver
appends to the results file as it arrives.

Every node needs ``dsh-cli[ray]`` and the provider distributions the profile uses
installed in the Python environment Ray runs. Credentials are never shipped: a
profile's ``pass_env`` reads the environment of the worker (set it where the node's Ray
is started, or through your cluster's secret mechanism).

A worker killed mid-task (node lost, OOM killer, ``kill -9``) leaves no product process:
the products run under the host-death guard of the worker process, which kills their
whole trees when the worker dies. The task is then recorded as failed, or started
again from scratch ``--ray-retries`` times first.

Ctrl-C cancels every Ray task (``ray.cancel``): a running task cancels its run and
returns only once the product's tree is gone. A second Ctrl-C kills the workers instead
(their guards remove the products).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from dsh_subagent import ERROR, Budget, CancelController

from dsh_cli.batch import BatchPlan, Summary, load_batch_profile, run_task, task_cwd
from dsh_cli.batch_io import BatchRecord, BatchTask, ResultsFile
from dsh_cli.errors import ProfileError, UsageError
from dsh_cli.loader import Composition
from dsh_cli.ray_cluster import RayUnavailableError, connect_ray, import_ray
from dsh_cli.runtime import open_runtime

__all__ = ["BUNDLE_PROFILE", "check_ray", "import_ray", "run_on_ray"]

BUNDLE_PROFILE: Final = ".dsh-batch/profile.toml"
"""Where the profile sits inside the shipped bundle."""

_POLL_SECONDS: Final = 0.2
"""How often the driver looks at Ctrl-C while it waits for Ray (and a worker for cancel)."""

_PROBE_SECONDS: Final = 10.0
"""How long the driver tries to open a TCP connection to the cluster's address."""

_CANCEL_REASON: Final = "interrupted (ray.cancel)"


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


def run_on_ray(
    address: str | None,
    *,
    profile: Path,
    files: str | None,
    plan: BatchPlan,
    base_cwd: str | None,
    retries: int,
    results: ResultsFile,
    err: TextIO,
) -> Summary:
    """Run ``plan`` on the Ray cluster at ``address`` (``None``: Ray's own default).

    Raises:
        UsageError: Ray is not installed.
    """
    with tempfile.TemporaryDirectory(prefix="dsh-batch-") as stage:
        _stage_bundle(Path(stage), profile, files)
        try:
            with connect_ray(address, {"working_dir": stage}) as ray:
                return _drive(ray, plan, base_cwd, retries, results, err)
        except RayUnavailableError as exc:
            return Summary(0, 0, False, len(plan.tasks), f"could not reach Ray: {exc}")
        except KeyboardInterrupt:  # Ctrl-C while Ray was starting: nothing ran
            return Summary(0, 0, True, len(plan.tasks))


def _drive(
    ray: Any, plan: BatchPlan, base_cwd: str | None, retries: int, results: ResultsFile, err: TextIO
) -> Summary:
    from dsh_cli.batch_progress import BatchDisplay

    concurrency = plan.concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(_ray_task).options(num_cpus=1, max_retries=retries, retry_exceptions=False)
    budget = plan.budget.model_dump_json() if plan.budget is not None else None
    signals: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    pending: dict[Any, tuple[BatchTask, float]] = {}
    queue = list(reversed(plan.tasks))
    handled = 0
    try:
        with BatchDisplay(len(plan.tasks), err) as display:
            while True:
                if len(signals) > handled:
                    _escalate(ray, pending, handled, signals[-1], display)
                    handled = len(signals)
                while not signals and queue and len(pending) < concurrency:
                    task = queue.pop()
                    ref = remote.remote(task.model_dump_json(), plan.provider, base_cwd, budget)
                    pending[ref] = (task, time.monotonic())
                    display.started()
                if not pending:
                    break
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_SECONDS)
                for ref in ready:
                    task, submitted = pending.pop(ref)
                    record = _settle(ray, ref, task, submitted, retries, interrupted=bool(signals))
                    if record is None:
                        display.left()
                    else:
                        results.append(record)
                        display.settled_one(record)
            return Summary(
                done=display.done,
                failed=display.failed,
                interrupted=bool(signals),
                not_run=len(plan.tasks) - display.settled,
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _escalate(ray: Any, pending: dict[Any, Any], handled: int, signum: int, display: Any) -> None:
    name = signal.Signals(signum).name
    if handled == 0:
        display.message(
            f"dsh: {name}: cancelling {len(pending)} Ray task(s); waiting for every product "
            "to exit (again to kill the workers)"
        )
        for ref in pending:
            ray.cancel(ref, force=False)
    elif handled == 1:
        display.message(f"dsh: {name}: killing the Ray workers; their guards remove the products")
        for ref in pending:
            ray.cancel(ref, force=True)
    else:
        display.message("dsh: still cancelling; waiting for Ray to report every task")


def _settle(
    ray: Any, ref: Any, task: BatchTask, submitted: float, retries: int, *, interrupted: bool
) -> BatchRecord | None:
    def failed(diagnostic: str) -> BatchRecord:
        elapsed = round(time.monotonic() - submitted, 3)
        return BatchRecord(
            id=task.id, stop_reason=ERROR, diagnostic=diagnostic, elapsed_seconds=elapsed
        )

    try:
        value = ray.get(ref)
    except ray.exceptions.RayError as exc:
        if interrupted:
            return None
        name = type(exc).__name__
        if isinstance(exc, ray.exceptions.RayTaskError):
            return failed(f"the Ray task raised {name}")
        attempts = f"{retries + 1} attempts" if retries else "--ray-retries 0"
        return failed(f"the Ray worker running this task died ({name}; {attempts})")
    if value is None:
        return None if interrupted else failed("the Ray task returned no record")
    return BatchRecord.model_validate_json(value)


class _NodeFirstStartAlone:
    """:class:`~dsh_cli.batch.FirstStartAlone` across the worker processes of one node.

    The workers of a node share its unpacked bundle (and so any product home in it): a
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


class _Interrupt:
    """``ray.cancel`` (a KeyboardInterrupt in the worker's main thread) → cancel the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = False
        self._controller: CancelController | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None

    def bind(self, controller: CancelController) -> None:
        with self._lock:
            self._controller = controller
            self._token = anyio.lowlevel.current_token()
            requested = self._requested
        if requested:
            controller.cancel(_CANCEL_REASON)

    def request(self) -> None:
        with self._lock:
            self._requested = True
            controller, token = self._controller, self._token
        if controller is not None and token is not None:
            with contextlib.suppress(RuntimeError):  # the event loop already finished
                anyio.from_thread.run_sync(controller.cancel, _CANCEL_REASON, token=token)


async def _run_in_worker(
    composition: Composition,
    provider: str,
    task: BatchTask,
    cwd: str,
    budget: Budget | None,
    interrupt: _Interrupt,
    gate: _NodeFirstStartAlone,
) -> BatchRecord | None:
    controller = CancelController()
    interrupt.bind(controller)
    async with open_runtime(composition) as runtime:
        return await run_task(runtime.service, provider, task, cwd, controller.signal, budget, gate)


def _ray_task(
    task_json: str, provider: str, base_cwd: str | None, budget_json: str | None
) -> str | None:
    """One batch task inside a Ray worker; the record as JSON, ``None`` when cancelled.

    Ray makes the unpacked bundle the current directory. The run happens on a thread of
    its own so that this (main) thread stays free to receive ``ray.cancel``'s
    KeyboardInterrupt and turn it into a cancellation the run settles from.
    """
    task = BatchTask.model_validate_json(task_json)
    bundle = os.getcwd()
    started = time.monotonic()

    def failed(diagnostic: str) -> str:
        elapsed = round(time.monotonic() - started, 3)
        return BatchRecord(
            id=task.id, stop_reason=ERROR, diagnostic=diagnostic, elapsed_seconds=elapsed
        ).model_dump_json()

    try:
        composition = load_batch_profile(Path(bundle, BUNDLE_PROFILE), bundle)
    except ProfileError as exc:
        return failed(f"could not load the profile on the Ray node: {exc.problems[0]}")
    budget = Budget.model_validate_json(budget_json) if budget_json is not None else None
    cwd = task_cwd(task, base_cwd or bundle, bundle)
    interrupt = _Interrupt()
    gate = _NodeFirstStartAlone(bundle)
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["record"] = anyio.run(
                _run_in_worker, composition, provider, task, cwd, budget, interrupt, gate
            )
        except BaseException as exc:
            outcome["error"] = f"internal error ({type(exc).__name__})"

    thread = threading.Thread(target=body, name=f"dsh-batch-{task.id}")
    thread.start()
    while thread.is_alive():
        try:
            thread.join(_POLL_SECONDS)
        except KeyboardInterrupt:
            interrupt.request()
    if "error" in outcome:
        return failed(outcome["error"])
    record: BatchRecord | None = outcome.get("record")
    return record.model_dump_json() if record is not None else None
