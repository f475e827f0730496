"""Map the app-server's ``codexErrorInfo`` to a safe category (``diagnostic:fixed-line``).

Only the pinned binary's declared union is preserved; everything else is ``unknown``.
The union below is the one ``codex app-server generate-json-schema`` emits for
``openai-codex-cli-bin==0.163.0`` (``CodexErrorInfo`` in ``ServerNotification.json``): the
seed's eleven strings and five objects, plus four strings this version adds
(``rateLimitExceeded``, ``flexUnavailable``, ``misalignmentPolicyViolation``,
``tooManyDenials``). A test derives the union from the kept schema and fails when the
two disagree, so a pin upgrade has to revisit this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CONTEXT_WINDOW_EXCEEDED",
    "HTTP_STATUS_VARIANTS",
    "OBJECT_VARIANTS",
    "SANDBOX_ERROR",
    "STRING_VARIANTS",
    "UNKNOWN",
    "ErrorCategory",
    "map_error_info",
]

UNKNOWN: Final = "unknown"
CONTEXT_WINDOW_EXCEEDED: Final = "contextWindowExceeded"
SANDBOX_ERROR: Final = "sandboxError"

STRING_VARIANTS: Final = frozenset(
    {
        # the categories of app-server 0.147.0
        "contextWindowExceeded",
        "sessionBudgetExceeded",
        "usageLimitExceeded",
        "serverOverloaded",
        "cyberPolicy",
        "internalServerError",
        "unauthorized",
        "badRequest",
        "threadRollbackFailed",
        "sandboxError",
        "other",
        # added by the pinned 0.163.0 schema
        "rateLimitExceeded",
        "flexUnavailable",
        "misalignmentPolicyViolation",
        "tooManyDenials",
    }
)
"""String variants preserved verbatim as the category."""

HTTP_STATUS_VARIANTS: Final = frozenset(
    {
        "httpConnectionFailed",
        "responseStreamConnectionFailed",
        "responseStreamDisconnected",
        "responseTooManyFailedAttempts",
    }
)
"""Object variants whose detail may carry a numeric ``httpStatusCode``."""

OBJECT_VARIANTS: Final = HTTP_STATUS_VARIANTS | {"activeTurnNotSteerable"}
"""Every object variant; ``activeTurnNotSteerable`` never exposes its ``turnKind``."""

_MAX_HTTP_STATUS: Final = 65535


@dataclass(frozen=True, slots=True)
class ErrorCategory:
    """The safe facts of one ``codexErrorInfo`` value."""

    category: str
    http_status: int | None = None


def _http_status(detail: Mapping[str, object]) -> int | None:
    status = detail.get("httpStatusCode")
    # bool is an int subclass; the schema's uint16 excludes it and strings like "503".
    if isinstance(status, int) and not isinstance(status, bool) and 0 <= status <= _MAX_HTTP_STATUS:
        return status
    return None


def map_error_info(value: object) -> ErrorCategory:
    """Map a raw ``codexErrorInfo`` to its category and optional HTTP status.

    Args:
        value: ``turn.error.codexErrorInfo`` as received (any JSON value).

    Returns:
        The verbatim variant name for a declared string or single-key object variant
        (object detail must itself be an object), with ``http_status`` only for the four
        connection/stream variants carrying an integer 0..65535; otherwise ``unknown``.
        Raw values are never copied.
    """
    if isinstance(value, str):
        return ErrorCategory(value if value in STRING_VARIANTS else UNKNOWN)
    if isinstance(value, Mapping) and len(value) == 1:
        ((key, detail),) = value.items()
        if key in OBJECT_VARIANTS and isinstance(detail, Mapping):
            status = _http_status(detail) if key in HTTP_STATUS_VARIANTS else None
            return ErrorCategory(str(key), status)
    return ErrorCategory(UNKNOWN)
