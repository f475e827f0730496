"""The standard published handle of an out-of-process child.

Recipe for a product provider (see the package README for the full example):

1. ``start()`` does setup in the caller's task (spawn, handshake) and rolls back on any
   failure before raising;
2. it registers ``local.request_cancel`` on ``request.cancel`` and builds the handle;
3. it starts ``handle.drive(settle)`` in ``request.task_group``, where ``settle`` awaits
   :func:`~dsh_subagent.settle_run_result`;
4. it returns the handle: the single point of publication.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable

import anyio

from dsh_subagent.progress import ProgressStream
from dsh_subagent.types import SubagentResult

__all__ = ["SubprocessRunHandle"]

_log = logging.getLogger("dsh_subagent")


class _Outcome:
    """A write-once value or exception that any number of tasks can await."""

    __slots__ = ("_error", "_event", "_result")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._result: SubagentResult | None = None
        self._error: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self._event.is_set()

    def set(self, result: SubagentResult) -> bool:
        if self._event.is_set():
            return False
        self._result = result
        self._event.set()
        return True

    def fail(self, error: BaseException) -> bool:
        if self._event.is_set():
            return False
        self._error = error
        self._event.set()
        return True

    async def wait(self) -> SubagentResult:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class _Disposal:
    __slots__ = ("error", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.error: BaseException | None = None


def _driver_fault(cause: BaseException) -> RuntimeError:
    fault = RuntimeError("subagent run driver ended before the run settled")
    fault.__cause__ = cause
    return fault


class SubprocessRunHandle:
    """A published out-of-process run implementing :class:`~dsh_subagent.SubagentRun`.

    ``result()`` returns the value delivered by :meth:`drive` (or :meth:`set_result`)
    to every caller. ``dispose()`` is memoised: the first call detaches the cancel
    listener, calls ``request_cancel()`` synchronously (local cancellation wins; the
    child is not assumed to cooperate) and awaits ``teardown()`` — the backend's ladder
    down to whole-tree exit — under a shield, so cancelling the first disposer does not
    abandon a half-torn-down process tree. Every call, concurrent or later, waits for
    that one teardown and re-raises its failure.

    Args:
        request_cancel: Synchronous local cancellation, e.g.
            :meth:`LocalCancellation.request_cancel`.
        teardown: Coroutine function releasing everything (protocol close, process tree
            termination, whole-tree exit wait). Runs exactly once.
        remove_cancel_listener: Remover returned by ``request.cancel.add_listener``.
        run_id: The run id; a fresh uuid4 string when omitted (never a product id).
        progress: The run's progress stream (a new empty one when omitted); closed
            once the run settles.
    """

    def __init__(
        self,
        *,
        request_cancel: Callable[[], None],
        teardown: Callable[[], Awaitable[None]],
        remove_cancel_listener: Callable[[], None] | None = None,
        run_id: str | None = None,
        progress: ProgressStream | None = None,
    ) -> None:
        self._id = run_id if run_id is not None else str(uuid.uuid4())
        self.progress = progress if progress is not None else ProgressStream()
        """The run's live progress; it ends when the run settles."""
        self._request_cancel = request_cancel
        self._teardown = teardown
        self._remove_cancel_listener = remove_cancel_listener
        self._outcome = _Outcome()
        self._disposal: _Disposal | None = None

    @property
    def id(self) -> str:
        """Provider-minted run id."""
        return self._id

    @property
    def local_agent(self) -> None:
        """Always ``None``: an out-of-process child has no in-process agent."""
        return None

    @property
    def settled(self) -> bool:
        """Whether the result is available."""
        return self._outcome.settled

    def set_result(self, result: SubagentResult) -> None:
        """Deliver the run's result; later deliveries are ignored. Ends the progress."""
        self.progress.close()
        self._outcome.set(result)

    def set_exception(self, error: BaseException) -> None:
        """Deliver an infrastructure fault no stop reason can represent."""
        self.progress.close()
        self._outcome.fail(error)

    async def drive(self, settle: Callable[[], Awaitable[SubagentResult]]) -> None:
        """Body of the run's driver task: await ``settle`` and deliver its value.

        Start it in ``request.task_group``. Should the driver task itself be cancelled
        (the service is shutting down) or ``settle`` raise, ``result()`` raises a
        ``RuntimeError`` instead of hanging; an exception from ``settle`` is logged and
        not propagated, so it cannot tear down the service's task group.
        """
        try:
            self.set_result(await settle())
        except Exception as exc:
            # Contained: a raising driver must not cancel the service's other runs.
            _log.exception("dsh_subagent: run settlement raised")
            self.set_exception(_driver_fault(exc))
        except BaseException as exc:
            self.set_exception(_driver_fault(exc))
            raise

    async def result(self) -> SubagentResult:
        """Wait for the run to settle; every call returns the same value."""
        return await self._outcome.wait()

    async def dispose(self) -> None:
        """Cancel what is left and wait for the one shared teardown (see class docs)."""
        disposal = self._disposal
        if disposal is not None:
            await disposal.event.wait()
            if disposal.error is not None:
                raise disposal.error
            return
        disposal = self._disposal = _Disposal()
        try:
            # A failing detach or cancel must not skip the teardown: the tree still exits.
            if self._remove_cancel_listener is not None:
                try:
                    self._remove_cancel_listener()
                except Exception:
                    _log.exception("dsh_subagent: removing the cancel listener raised")
            try:
                self._request_cancel()
            except Exception:
                _log.exception("dsh_subagent: request_cancel raised during dispose")
            with anyio.CancelScope(shield=True):
                await self._teardown()
        except BaseException as exc:
            disposal.error = exc
            raise
        finally:
            disposal.event.set()
