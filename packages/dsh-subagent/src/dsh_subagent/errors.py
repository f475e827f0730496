"""The dsh-subagent error hierarchy. Codes are public API; message wording is not."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ProductStartError",
    "ProductTeardownError",
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

    The message is the fixed safe diagnostic line (seed 000); the original failure stays
    on ``__cause__``. ``rollback_failed`` is true when undoing the partial start also
    failed; then the message carries both the startup and the teardown line, and a
    cancelled background Job still reports ``failed`` so the cleanup failure is not
    hidden behind ``killed``.
    """

    def __init__(self, message: str, *, rollback_failed: bool = False) -> None:
        super().__init__(SubagentErrorCode.PRODUCT_START_FAILED, message)
        self.rollback_failed = rollback_failed


class ProductTeardownError(SubagentError):
    """A published run's ``dispose()`` failed; the message is the safe teardown line."""

    def __init__(self, message: str) -> None:
        super().__init__(SubagentErrorCode.PRODUCT_TEARDOWN_FAILED, message)
