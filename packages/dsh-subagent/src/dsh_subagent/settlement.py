"""Never-raising settlement of a published out-of-process run (rules ``settlement:*``).

Once a run is published, every failure must arrive as a :class:`SubagentResult`; a
result that raises would surface from an uncontrolled place in the holder. The rules:

* local cancellation that already won settles ``aborted`` with the partial output and
  no diagnostic, even when the attempt itself went on to succeed;
* any other failure is flattened to ``error`` with the bounded diagnostic;
* neither the error sink nor the diagnostic collector can make settlement raise;
* the cancel listener the provider registered is removed on every path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import anyio

from dsh_subagent.diagnostics import limit_diagnostic
from dsh_subagent.types import ABORTED, ERROR, ContentBlock, SubagentResult

__all__ = ["LocalCancellation", "settle_run_result"]

_log = logging.getLogger("dsh_subagent")


class LocalCancellation:
    """The local cancel decision of one published run.

    ``request_cancel()`` is synchronous and idempotent: it records that cancellation
    won and cancels :attr:`scope`, the cancel scope :func:`settle_run_result` runs the
    attempt in. It never assumes the child cooperates. Its signature fits
    :meth:`CancelSignal.add_listener` directly.
    """

    __slots__ = ("_cancelled", "scope")

    def __init__(self) -> None:
        self._cancelled = False
        self.scope = anyio.CancelScope()

    @property
    def cancelled(self) -> bool:
        """Whether local cancellation has been requested (and therefore wins)."""
        return self._cancelled

    def request_cancel(self, reason: str | None = None) -> None:
        """Settle local cancellation now; the attempt is cancelled at its next checkpoint."""
        del reason  # the stop reason is "aborted" whatever the cancel reason was
        self._cancelled = True
        self.scope.cancel()


def _safe_output(collect_output: Callable[[], Sequence[ContentBlock]]) -> tuple[ContentBlock, ...]:
    try:
        return tuple(collect_output())
    except Exception:  # settlement never raises; lose the partial output instead
        _log.exception("dsh_subagent: collect_output raised during settlement")
        return ()


def _safe_diagnostic(collect_diagnostic: Callable[[], str | None] | None) -> str | None:
    if collect_diagnostic is None:
        return None
    try:
        diagnostic = collect_diagnostic()
    except Exception:
        _log.exception("dsh_subagent: collect_diagnostic raised during settlement")
        return None
    return None if diagnostic is None else limit_diagnostic(diagnostic)


def _no_output() -> tuple[ContentBlock, ...]:
    return ()


async def settle_run_result(
    attempt: Callable[[], Awaitable[SubagentResult]],
    *,
    local: LocalCancellation,
    collect_output: Callable[[], Sequence[ContentBlock]] = _no_output,
    collect_diagnostic: Callable[[], str | None] | None = None,
    on_error: Callable[[Exception, str], None] | None = None,
    remove_cancel_listener: Callable[[], None] | None = None,
) -> SubagentResult:
    """Run ``attempt`` (the published turn) and turn every outcome into a result.

    Call it in the run's driver task, inside the service task group. The attempt runs in
    ``local.scope``, so ``local.request_cancel()`` interrupts it.

    Args:
        attempt: Coroutine function driving the turn to its native result.
        local: The run's local cancellation; once cancelled it wins over any outcome.
        collect_output: Snapshot of partial assistant output, used for ``aborted`` and
            ``error`` results.
        collect_diagnostic: The provider's safe diagnostic for an ``error`` result.
        on_error: Sink told ``(error, "error")`` before flattening, e.g. for logging.
        remove_cancel_listener: Remover of the provider's listener on the request's
            :class:`CancelSignal`; called on every path.

    Returns:
        The attempt's result (diagnostic bounded), or ``aborted`` with the partial output
        and no diagnostic, or ``error`` with the partial output and bounded diagnostic.
        Only cancellation of the calling task itself (not local cancellation)
        propagates.
    """
    try:
        failure: Exception | None = None
        result: SubagentResult | None = None
        with local.scope:
            try:
                result = await attempt()
            except Exception as exc:
                failure = exc
        if local.cancelled:
            return SubagentResult(output=_safe_output(collect_output), stop_reason=ABORTED)
        if result is not None:
            if result.diagnostic is not None:
                # The shared result boundary bounds every diagnostic (``diagnostic:bounded``),
                # not only the flattened ones: a provider's own max-tokens one included.
                bounded = limit_diagnostic(result.diagnostic)
                if bounded != result.diagnostic:
                    result = result.model_copy(update={"diagnostic": bounded})
            return result
        error = failure if failure is not None else RuntimeError("attempt was cancelled")
        if on_error is not None:
            try:
                on_error(error, ERROR)
            except Exception:  # the diagnostic sink cannot make the result raise
                _log.exception("dsh_subagent: settlement on_error sink raised")
        return SubagentResult(
            output=_safe_output(collect_output),
            diagnostic=_safe_diagnostic(collect_diagnostic),
            stop_reason=ERROR,
        )
    finally:
        if remove_cancel_listener is not None:
            try:
                remove_cancel_listener()
            except Exception:
                _log.exception("dsh_subagent: removing the cancel listener raised")
