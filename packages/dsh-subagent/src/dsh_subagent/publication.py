"""Publication of a started run: the part of the lifecycle every provider shares.

Once a provider's setup succeeded, :func:`publish_run` makes the run a
:class:`~dsh_subagent.SubprocessRunHandle`, wires the request's cancel signal to the
run's local cancellation, and drives the attempt to a result in the service's task
group. The rules it enforces once, for every provider:

* the result never raises (``settlement:result-never-raises``): every failure settles
  ``error`` with the bounded diagnostic;
* local cancellation wins (``settlement:cancel-mid-run``): an aborted request settles
  ``aborted`` with the partial output, and a request aborted before publication is
  aborted at once;
* the result is delivered before the after-cancel hook runs, so a product that is slow to
  acknowledge an interrupt never delays it;
* teardown runs exactly once however many times ``dispose()`` is called
  (``quiescence:dispose-idempotent``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from dsh_subagent.diagnostics import ProductFailure
from dsh_subagent.progress import ProgressStream
from dsh_subagent.run_handle import SubprocessRunHandle
from dsh_subagent.settlement import LocalCancellation, settle_run_result
from dsh_subagent.types import ContentBlock, ResolvedSubagentStartRequest, SubagentResult

__all__ = ["Once", "RunState", "publish_run"]


def _no_output() -> tuple[ContentBlock, ...]:
    return ()


def publish_run(
    request: ResolvedSubagentStartRequest,
    *,
    attempt: Callable[[], Awaitable[SubagentResult]],
    teardown: Callable[[], Awaitable[None]],
    collect_output: Callable[[], Sequence[ContentBlock]] = _no_output,
    collect_diagnostic: Callable[[], str | None] | None = None,
    on_error: Callable[[Exception, str], None] | None = None,
    after_cancel: Callable[[], Awaitable[None]] | None = None,
    on_cancel: Callable[[str], None] | None = None,
    run_id: str | None = None,
    progress: ProgressStream | None = None,
) -> SubprocessRunHandle:
    """Publish a started run and start its driver in ``request.task_group``.

    Args:
        request: The resolved start request (its cancel signal and task group).
        attempt: Drives the run to its native result; runs in the driver task.
        teardown: Releases everything down to whole-tree exit; runs once, shielded.
        collect_output: Partial output for an ``aborted`` or ``error`` result.
        collect_diagnostic: The safe diagnostic of an ``error`` result.
        on_error: Told ``(error, "error")`` before a failure is flattened (logging).
        after_cancel: Runs, shielded, after a locally cancelled run has settled
            ``aborted`` (e.g. a polite interrupt sent to the product). It must bound its
            own awaits.
        on_cancel: Told the reason when the request's cancel signal fires.
        run_id: The run id; a fresh uuid4 when omitted.
        progress: The run's progress stream; it ends when the run settles, and the
            last usage it carried becomes the result's ``usage`` when the attempt
            reported none.

    Returns:
        The published handle: the single point of publication.
    """
    local = LocalCancellation()

    def cancel_listener(reason: str) -> None:
        if on_cancel is not None:
            on_cancel(reason)
        local.request_cancel(reason)

    remove = request.cancel.add_listener(cancel_listener)
    handle = SubprocessRunHandle(
        request_cancel=local.request_cancel,
        teardown=teardown,
        remove_cancel_listener=remove,
        run_id=run_id,
        progress=progress,
    )

    async def settle() -> SubagentResult:
        result = await settle_run_result(
            attempt,
            local=local,
            collect_output=collect_output,
            collect_diagnostic=collect_diagnostic,
            on_error=on_error,
            remove_cancel_listener=remove,
        )
        usage = handle.progress.usage
        if result.usage is None and usage is not None:
            result = result.model_copy(update={"usage": usage})
        if local.cancelled and after_cancel is not None:
            handle.set_result(result)  # the result does not wait for the product
            with anyio.CancelScope(shield=True):
                await after_cancel()
        return result

    if request.cancel.aborted:  # aborted between setup and the listener
        local.request_cancel()
    request.task_group.start_soon(handle.drive, settle)
    return handle


class Once:
    """An async action run at most once; later callers wait for the first run."""

    def __init__(self, action: Callable[[], Awaitable[None]]) -> None:
        self._action = action
        self._done: anyio.Event | None = None

    async def __call__(self) -> None:
        if self._done is not None:
            await self._done.wait()
            return
        self._done = anyio.Event()
        try:
            await self._action()
        finally:
            self._done.set()


class RunState:
    """What the published run of a product provider has settled so far."""

    __slots__ = ("failure", "finished")

    def __init__(self) -> None:
        self.failure: tuple[ProductFailure, str | None] | None = None
        self.finished = False
