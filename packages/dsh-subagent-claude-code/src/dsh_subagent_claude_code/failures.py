"""Safe failure facts of a Claude Code run (``diagnostic:*``).

Only allowlisted values reach a diagnostic: the four SDK error subtypes, the provider's
fixed categories, the stage and a numeric HTTP status (the runtime adds the CLI's exit
facts where the exit is part of the failure: ``process-exit``, a failed exit status;
never to ``missing-result``, a clean exit without a result).
Result text, ``errors[]``, stderr, tool input and exception messages never do; the
original failure rides on ``__cause__`` and in host logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from claude_agent_sdk import ResultMessage
from dsh_subagent import ProductFailure

from dsh_subagent_claude_code.config import PermissionMode
from dsh_subagent_claude_code.product import PRODUCT

__all__ = [
    "SDK_ERROR_SUBTYPES",
    "PermissionFact",
    "accepted_answer",
    "result_failure",
]

SDK_ERROR_SUBTYPES: Final = frozenset(
    {
        "error_during_execution",
        "error_max_turns",
        "error_max_budget_usd",
        "error_max_structured_output_retries",
    }
)
"""The pinned SDK's error subtypes; each is preserved exactly as the category."""


@dataclass(frozen=True, slots=True)
class PermissionFact:
    """One unattended decision the provider or the product made during a run."""

    mode: PermissionMode
    request: Literal["tool permission", "MCP elicitation"]
    decision: Literal["denied", "declined"]
    reason: str

    def line(self) -> str:
        """The fixed safe line that follows a failure line."""
        return (
            f"Claude Code unattended decision (mode: {self.mode}; request: {self.request}; "
            f"decision: {self.decision}): {self.reason}"
        )


def _http_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535:
        return value
    return None


def accepted_answer(message: ResultMessage) -> str | None:
    """The answer of a strict success: subtype ``success``, ``is_error`` false, non-blank."""
    if (
        message.subtype == "success"
        and message.is_error is False
        and isinstance(message.result, str)
        and message.result.strip()
    ):
        return message.result
    return None


def result_failure(message: ResultMessage) -> ProductFailure:
    """Classify a result message that is not a strict success (stage ``query-run``).

    A known SDK subtype is kept exactly; an error-marked or blank ``success`` (the SDK
    reports HTTP failures this way) is ``invalid-success`` with the numeric
    ``api_error_status``; any other subtype is ``unknown`` and its value is not copied.
    """
    subtype = message.subtype
    if isinstance(subtype, str) and subtype in SDK_ERROR_SUBTYPES:
        return ProductFailure(PRODUCT, "query-run", subtype)
    if subtype == "success":
        status = _http_status(message.api_error_status)
        return ProductFailure(PRODUCT, "query-run", "invalid-success", http_status=status)
    return ProductFailure(PRODUCT, "query-run", "unknown")
