"""The dsh-subagent error hierarchy. Codes are public API; message wording is not."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh_subagent.diagnostics import ProductFailure

__all__ = [
    "ContinuationUnavailableError",
    "ProductFailureError",
    "ProductStartError",
    "ProductTeardownError",
    "StartCancelledError",
    "SubagentError",
    "SubagentErrorCode",
]


class SubagentErrorCode(StrEnum):
    """Stable codes carried by :class:`SubagentError`."""

    NO_PROVIDER = "NO_PROVIDER"
    UNSUPPORTED_CAPABILITY = "UNSUPPORTED_CAPABILITY"
    DUPLICATE_PROVIDER = "DUPLICATE_PROVIDER"
    INVALID_REQUEST = "INVALID_REQUEST"
    """A request field has an invalid value (e.g. a negative ``max_depth``)."""
    INVALID_CONFIG = "INVALID_CONFIG"
    """A provider or tool configuration value is invalid (raised at load)."""
    NO_WORKING_DIRECTORY = "NO_WORKING_DIRECTORY"
    """Neither a configured cwd nor a usable parent-session cwd exists."""
    PRODUCT_START_FAILED = "PRODUCT_START_FAILED"
    PRODUCT_TEARDOWN_FAILED = "PRODUCT_TEARDOWN_FAILED"
    START_CANCELLED = "START_CANCELLED"
    """The request was cancelled before its run was published; nothing is left running."""
    CONTINUATION_UNAVAILABLE = "CONTINUATION_UNAVAILABLE"
    """The request's continuation handle names no session this provider instance can
    continue (another instance or product, or a session the product no longer has);
    nothing is left running."""


class SubagentError(Exception):
    """Root of every error this distribution and the product providers raise."""

    def __init__(self, code: SubagentErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def message(self) -> str:
        """The fixed-format message (safe to show to a model)."""
        return str(self.args[0])


class ProductStartError(SubagentError):
    """A product provider's ``start()`` failed before publication.

    The message is the fixed safe diagnostic line (rule ``diagnostic:fixed-line``); the
    original failure stays on ``__cause__``. ``rollback_failed`` is true when undoing the
    partial start also failed; then the message carries both the startup and the
    teardown line, and a cancelled background Job still reports ``failed`` so the
    cleanup failure is not hidden behind ``killed``.
    """

    def __init__(
        self,
        message: str,
        *,
        rollback_failed: bool = False,
        code: SubagentErrorCode = SubagentErrorCode.PRODUCT_START_FAILED,
    ) -> None:
        super().__init__(code, message)
        self.rollback_failed = rollback_failed


class StartCancelledError(ProductStartError):
    """The request's cancel signal fired before the run was published.

    Raised by every provider's ``start()`` for a request aborted before the call or
    during startup; whatever had started was rolled back to whole-tree exit first. It is
    a :class:`ProductStartError` (code ``START_CANCELLED``), so code that handles start
    failures handles it too.
    """

    def __init__(self, message: str, *, rollback_failed: bool = False) -> None:
        super().__init__(
            message, rollback_failed=rollback_failed, code=SubagentErrorCode.START_CANCELLED
        )


class ContinuationUnavailableError(ProductStartError):
    """A continuation handle was refused before publication (code
    ``CONTINUATION_UNAVAILABLE``); the message is always the fixed
    :data:`~dsh_subagent.CONTINUATION_UNAVAILABLE_MESSAGE`, whichever check refused it, so
    a caller learns nothing about sessions it did not start. Whatever had started was
    rolled back to whole-tree exit first.
    """

    def __init__(self, message: str, *, rollback_failed: bool = False) -> None:
        super().__init__(
            message,
            rollback_failed=rollback_failed,
            code=SubagentErrorCode.CONTINUATION_UNAVAILABLE,
        )


class ProductTeardownError(SubagentError):
    """A published run's ``dispose()`` failed; the message is the safe teardown line."""

    def __init__(self, message: str) -> None:
        super().__init__(SubagentErrorCode.PRODUCT_TEARDOWN_FAILED, message)


class ProductFailureError(Exception):
    """Raised inside a provider's hooks: the product failed, described by safe facts only.

    The runtime turns it into the run's diagnostic (or a start error's message), merging
    the product process's exit facts in. The message never holds product text.

    Args:
        failure: The allowlisted facts (product, stage, category, HTTP status).
        detail: An optional second safe line, e.g. the provider's permission fact.
        exited: Whether the product's exit is part of this failure (it ended before a
            terminal outcome, or its exit status is what failed); only then do the
            exit facts join a published run's line. ``None`` (the default) means: when
            the category is ``process-exit``. A failure the product reported itself
            (an error result, a failed turn) is ``False``.
    """

    def __init__(
        self, failure: ProductFailure, detail: str | None = None, *, exited: bool | None = None
    ) -> None:
        super().__init__(f"{failure.stage}: {failure.category or 'unknown'}")
        self.failure = failure
        self.detail = detail
        self.exited = failure.category == "process-exit" if exited is None else exited
