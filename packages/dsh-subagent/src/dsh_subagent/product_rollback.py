"""The rollback of a failed or cancelled start: whole-tree exit, then one start error."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import anyio

from dsh_subagent.continuation import (
    CONTINUATION_UNAVAILABLE_CATEGORY,
    CONTINUATION_UNAVAILABLE_MESSAGE,
    CONTINUATION_UNSUPPORTED_CATEGORY,
)
from dsh_subagent.errors import (
    ContinuationUnavailableError,
    ProductFailureError,
    ProductStartError,
    StartCancelledError,
    SubagentErrorCode,
)
from dsh_subagent.product_child import ProductChild, failure_of
from dsh_subagent.product_seam import ProductSeam

if TYPE_CHECKING:
    from dsh_subagent.types import ResolvedSubagentStartRequest

__all__ = ["Cancelled", "roll_back"]


class Cancelled(Exception):
    """Local marker: the request's cancel signal fired during startup."""


async def roll_back(
    provider: ProductSeam,
    child: ProductChild | None,
    error: BaseException,
    request: ResolvedSubagentStartRequest,
) -> NoReturn:
    """End whatever started (shielded), then raise the one error the start reports."""
    cancelled = isinstance(error, Cancelled) or (
        isinstance(error, Exception) and request.cancel.aborted
    )
    with anyio.CancelScope(shield=True):
        line = None
        if isinstance(error, Exception) and not cancelled:
            failure, detail = await failure_of(provider.product, child, error, publishing=False)
            line = provider._line(failure, detail)
        if child is not None:
            try:
                await provider._release(child)
            except Exception as teardown_exc:
                teardown = provider._teardown_line(child)
                first = provider._cancelled_message() if cancelled or line is None else line
                kind = StartCancelledError if cancelled else ProductStartError
                raise kind(f"{first}; {teardown}", rollback_failed=True) from (
                    BaseExceptionGroup("startup and rollback failed", [error, teardown_exc])
                )
    if not isinstance(error, Exception):
        raise error  # the caller's own cancellation propagates after the rollback
    if cancelled:
        raise StartCancelledError(provider._cancelled_message()) from error
    if (
        isinstance(error, ProductFailureError)
        and error.failure.category == CONTINUATION_UNAVAILABLE_CATEGORY
    ):
        raise ContinuationUnavailableError(CONTINUATION_UNAVAILABLE_MESSAGE) from error
    assert line is not None
    if (
        isinstance(error, ProductFailureError)
        and error.failure.category == CONTINUATION_UNSUPPORTED_CATEGORY
    ):
        code = SubagentErrorCode.UNSUPPORTED_CAPABILITY
        raise ProductStartError(line, code=code) from error
    raise ProductStartError(line) from error
