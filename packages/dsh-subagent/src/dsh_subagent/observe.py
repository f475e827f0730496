"""Run observers: a process-wide hook that sees every run a service starts.

Instrumentation (tracing, metrics) needs the life of each run from the caller's own
context: the start as the caller asked for it, the published run, its settlement and the
end of its teardown. An observer registered with :func:`add_run_observer` is asked at
every :meth:`SubagentService.start`, in the calling task (so context variables such as the
caller's current span are visible), and may return a :class:`RunObservation` that
follows that one run.

Observers never change a run: every call into them is contained (a failure is logged on
``dsh_subagent`` and the run goes on), and with no observer registered nothing is
allocated per run. An observer sees what the host sees (the request, progress, the
result); keeping secrets and product text out of what it records is its own duty.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from dsh_subagent.progress import ProgressStream
    from dsh_subagent.types import SubagentProvider, SubagentResult, SubagentStartRequest

__all__ = [
    "ObservedRun",
    "RunObservation",
    "RunObserver",
    "add_run_observer",
    "report_stage",
]

_log = logging.getLogger("dsh_subagent")


@runtime_checkable
class ObservedRun(Protocol):
    """What an observation learns about a published run."""

    @property
    def run_id(self) -> str:
        """The service-minted id shared by the run's start and end events."""
        ...

    @property
    def provider(self) -> str:
        """The provider name the run started under."""
        ...

    @property
    def progress(self) -> ProgressStream:
        """The run's live progress (observations add a listener; they never iterate)."""
        ...


class RunObservation(Protocol):
    """Follows one start request; every method is called at most once, in this order.

    Either :meth:`start_failed` (nothing was published), or :meth:`started` followed by
    :meth:`settled` and, independently, :meth:`teardown_started` /
    :meth:`teardown_ended` (a holder may dispose before or after the run settles).

    An observation may also define ``stage_entered(stage: str) -> None``: it is then
    called, before :meth:`started` or :meth:`start_failed`, each time the provider's
    start enters a stage it reports with :func:`report_stage` (the product providers:
    ``launch``, ``spawn``, then their handshake stage such as ``initialize``).
    """

    def start_failed(self, error: BaseException) -> None:
        """The start raised (a refusal, a product start failure, a cancellation)."""

    def started(self, run: ObservedRun) -> None:
        """The run was published."""

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        """The run's result is known (``error`` when ``result()`` raised instead)."""

    def teardown_started(self) -> None:
        """The first ``dispose()`` of the run began."""

    def teardown_ended(self, error: BaseException | None) -> None:
        """That dispose finished: no process of the run is alive (or it raised)."""


class RunObserver(Protocol):
    """Asked at every start; returns an observation for that run, or ``None``.

    ``provider`` is the instance registered as ``name``, ``None`` when there is none
    (the start is then refused with ``NO_PROVIDER``).
    """

    def start_requested(
        self, name: str, provider: SubagentProvider | None, request: SubagentStartRequest
    ) -> RunObservation | None: ...


_observers: list[RunObserver] = []
_lock = threading.Lock()
_starting: ContextVar[tuple[RunObservation, ...]] = ContextVar("dsh_observed_start", default=())


def report_stage(stage: str) -> None:
    """Tell whoever observes the start in progress (in this task) that it entered ``stage``.

    For provider authors: call it as ``start()`` moves through its stages; the names are
    yours (short fixed words: they become telemetry, so never put request or product text
    in them). With no observer it costs one context-variable read.
    """
    for observation in _starting.get():
        entered = getattr(observation, "stage_entered", None)
        if entered is None:
            continue
        try:
            entered(stage)
        except Exception:
            _log.exception("dsh_subagent: a run observation raised")


@contextlib.contextmanager
def observing_start(observations: tuple[RunObservation, ...]) -> Iterator[None]:
    """While a provider starts, :func:`report_stage` reaches ``observations``."""
    token = _starting.set(observations)
    try:
        yield
    finally:
        _starting.reset(token)


def add_run_observer(observer: RunObserver) -> Callable[[], None]:
    """Register ``observer`` for every service in this process; returns its remover.

    The remover is idempotent. Runs already observed keep their observations.
    """
    with _lock:
        _observers.append(observer)

    def remove() -> None:
        with _lock:
            if observer in _observers:
                _observers.remove(observer)

    return remove


def open_observations(
    name: str, provider: SubagentProvider | None, request: SubagentStartRequest
) -> tuple[RunObservation, ...]:
    """Ask every observer about this start (an empty tuple, allocation-free, when none)."""
    if not _observers:
        return ()
    observations: list[RunObservation] = []
    for observer in list(_observers):
        try:
            observation = observer.start_requested(name, provider, request)
        except Exception:
            _log.exception("dsh_subagent: a run observer raised at start")
            continue
        if observation is not None:
            observations.append(observation)
    return tuple(observations)


def notify(
    observations: tuple[RunObservation, ...], call: Callable[[RunObservation], None]
) -> None:
    """Call ``call(observation)`` for each, containing and logging each failure."""
    for observation in observations:
        try:
            call(observation)
        except Exception:
            _log.exception("dsh_subagent: a run observation raised")
