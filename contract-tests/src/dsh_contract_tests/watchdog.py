"""The watchdog: a provider that never returns cannot freeze the kit, shielded or not.

Every kit operation that waits on the provider (the factory, ``start()``, ``result()``,
``dispose()``, the service's exit, the hold wait) registers with the running test's
:class:`OperationClock` for as long as it waits, with its bound. The harness cancels a
wait that runs out (:func:`anyio.move_on_after`); a provider that shields itself from
that cancellation keeps its caller waiting forever, so the kit never waits in the same
event loop as the provider. Each kit test runs its rule in a thread of its own, with an
event loop of the test's backend (:func:`run_isolated`); the test's own thread watches
the clock and, when an operation outlives its bound by :func:`grace`, abandons that
thread (asking its loop to cancel what still listens) and raises :class:`Hang`. The test
then ends within the bound; what the run left is killed by the harness.

A wait on the test's own thread stays interruptible: SIGINT (Ctrl-C) ends a kit run at
any point, and the harness kills the run's processes on the way out.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

__all__ = [
    "Hang",
    "OperationClock",
    "grace",
    "in_worker",
    "pending",
    "run_isolated",
    "run_isolated_sync",
]

_T = TypeVar("_T")

_POLL = 0.02
"""Seconds between two looks of the watching thread at the clock."""


def grace(bound: float) -> float:
    """Seconds an operation may outlive its bound before the watchdog abandons it.

    A cancelled wait returns at once, but the runtime's own teardown is shielded on
    purpose (it ends the process tree) and may still be finishing when a bound runs out.
    """
    return min(10.0, max(2.0, bound / 6))


class Hang(Exception):
    """An operation outlived its bound and its grace: the watchdog abandoned the test's
    thread.

    Attributes:
        what: The operation, in words (``"dispose()"``).
        bound: Its bound in seconds.
    """

    def __init__(self, what: str, bound: float) -> None:
        self.what = what
        self.bound = bound
        super().__init__(
            f"{what} did not return within {bound:g} s, nor in the {grace(bound):g} s after "
            "the kit cancelled it: it does not yield to cancellation (a shielded wait)"
        )


@dataclass(frozen=True, slots=True)
class _Operation:
    what: str
    bound: float
    deadline: float


class OperationClock:
    """The operations of one kit test that are waiting on the provider (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, _Operation] = {}
        self._next = 0

    def begin(self, what: str, bound: float) -> int:
        """Register a wait; the handle for :meth:`end`."""
        with self._lock:
            self._next += 1
            deadline = time.monotonic() + bound + grace(bound)
            self._pending[self._next] = _Operation(what, bound, deadline)
            return self._next

    def end(self, handle: int) -> None:
        """The wait ``handle`` returned."""
        with self._lock:
            self._pending.pop(handle, None)

    def overdue(self) -> _Operation | None:
        """The first operation past its bound and grace, if any."""
        now = time.monotonic()
        with self._lock:
            for operation in self._pending.values():
                if now >= operation.deadline:
                    return operation
        return None


_CLOCK: contextvars.ContextVar[OperationClock | None] = contextvars.ContextVar(
    "dsh_contract_clock", default=None
)


@contextmanager
def pending(what: str, bound: float) -> Iterator[None]:
    """Register ``what`` (bounded by ``bound`` seconds) with the running test's clock."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    handle = clock.begin(what, bound)
    try:
        yield
    finally:
        clock.end(handle)


def _kit_context() -> contextvars.Context:
    """A fresh context carrying only the kit's own variables (named ``dsh_*``).

    Not a copy of the caller's: that names the caller's event loop and task (sniffio,
    the test runner's state), which would confuse the worker's own loop.
    """
    kept = [(var, value) for var, value in contextvars.copy_context().items()]
    fresh = contextvars.Context()
    for var, value in kept:
        if var.name.startswith("dsh_"):
            fresh.run(var.set, value)
    return fresh


class _Worker(threading.Thread):
    """A daemon thread running one kit rule; abandoned if an operation in it hangs."""

    def __init__(self, body: Callable[[], Any], clock: OperationClock) -> None:
        super().__init__(name="dsh-contract-rule", daemon=True)
        self._context = _kit_context()
        self._body = body
        self.clock = clock
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.cancel: Callable[[], None] = lambda: None

    def run(self) -> None:
        try:
            self.result = self._context.run(self._run)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def _run(self) -> Any:
        _CLOCK.set(self.clock)
        return self._body()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error.with_traceback(self.error.__traceback__)
        return self.result

    def abandon(self) -> None:
        """Ask the thread's loop to cancel what still listens, and stop waiting for it."""
        with contextlib.suppress(Exception):  # the loop may already be gone
            self.cancel()


def _backend() -> str:
    """The running backend's name (``"trio"`` or ``"asyncio"``)."""
    native = anyio.lowlevel.current_token().native_token
    return "trio" if hasattr(native, "run_sync_soon") else "asyncio"


def _canceller(scope: anyio.CancelScope) -> Callable[[], None]:
    """Cancel ``scope`` from another thread, without waiting for the loop to listen."""
    native: Any = anyio.lowlevel.current_token().native_token
    if hasattr(native, "run_sync_soon"):  # a trio token
        return lambda: native.run_sync_soon(scope.cancel)
    return lambda: native.call_soon_threadsafe(scope.cancel)  # an asyncio loop


async def run_isolated(func: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any) -> _T:
    """Run ``func`` in a thread of its own, on this backend, under the watchdog.

    Raises:
        Hang: An operation of ``func`` outlived its bound and grace (the thread is
            abandoned).
    """
    backend = _backend()
    clock = OperationClock()
    worker: _Worker

    async def body() -> _T:
        with anyio.CancelScope() as scope:
            worker.cancel = _canceller(scope)
            return await func(*args, **kwargs)
        raise anyio.get_cancelled_exc_class()()  # cancelled by an abandoning watchdog

    worker = _Worker(lambda: anyio.run(body, backend=backend), clock)
    worker.start()
    try:
        while not worker.done.is_set():  # a thread cannot set an anyio event: polling
            if (late := clock.overdue()) is not None:
                worker.abandon()
                raise Hang(late.what, late.bound)
            await anyio.sleep(_POLL)
    except BaseException:
        worker.abandon()
        raise
    return worker.outcome()  # type: ignore[no-any-return]


def run_isolated_sync(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """:func:`run_isolated` for a rule that is a plain function (it runs its own loops)."""
    clock = OperationClock()
    worker = _Worker(lambda: func(*args, **kwargs), clock)
    worker.start()
    while not worker.done.wait(_POLL):
        if (late := clock.overdue()) is not None:
            raise Hang(late.what, late.bound)
    return worker.outcome()  # type: ignore[no-any-return]


def in_worker() -> bool:
    """Whether this code runs in a kit rule's own thread (already under a watchdog)."""
    return _CLOCK.get() is not None
