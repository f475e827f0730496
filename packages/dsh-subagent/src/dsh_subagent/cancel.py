"""The one cancellation channel of a delegation (a request's cancel signal).

A :class:`CancelSignal` is handed to a provider inside the start request. Before
publication an abort makes ``start()`` roll back and raise; after publication it makes
the run settle ``aborted``. It is a plain object rather than an anyio cancel scope
because it crosses task boundaries: the tool call that starts a run, the Job that owns
a background run and the provider's own driver task all observe the same signal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import anyio

__all__ = ["CancelController", "CancelSignal"]

_log = logging.getLogger("dsh_subagent")

DEFAULT_CANCEL_REASON = "aborted"


class CancelSignal:
    """Read side of a cancellation channel: observe, never trigger."""

    __slots__ = ("_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._listeners: list[Callable[[str], None]] = []
        self._event: anyio.Event | None = None

    @property
    def aborted(self) -> bool:
        """Whether cancellation has been requested."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """The reason given by the first ``cancel()``, or ``None`` while not aborted."""
        return self._reason

    def add_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(reason)`` once when the signal aborts; returns a remover.

        A listener added to an already-aborted signal is never called: callers check
        :attr:`aborted` first, exactly as with an AbortSignal.
        """
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    async def wait(self) -> str:
        """Wait until the signal aborts and return the reason."""
        if self._reason is None:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        assert self._reason is not None
        return self._reason

    def _abort(self, reason: str) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        if self._event is not None:
            self._event.set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            try:
                listener(reason)
            except Exception:  # a listener must not stop the others from hearing the abort
                _log.exception("dsh_subagent: cancel listener raised")


class CancelController:
    """Write side of a cancellation channel; owns one :class:`CancelSignal`."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = CancelSignal()

    def cancel(self, reason: str = DEFAULT_CANCEL_REASON) -> None:
        """Abort the signal. Idempotent: the first reason wins; listeners run synchronously."""
        self.signal._abort(reason)
