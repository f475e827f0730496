"""Safe failure facts of a Claude Code run (seed 000).

Only allowlisted values reach a diagnostic: the four SDK error subtypes, the fixed
provider categories, the stage, a numeric HTTP status and the managed process outcome.
Result text, ``errors[]``, stderr, tool input and exception messages never do; the
original failure rides on ``__cause__`` and in host logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from claude_agent_sdk import ResultMessage
from dsh_subagent import ProductFailure, format_product_failure

from dsh_subagent_claude_code.config import PermissionMode
from dsh_subagent_claude_code.product import PRODUCT

__all__ = [
    "FIXED_CATEGORIES",
    "SDK_ERROR_SUBTYPES",
    "ClaudeRunFailure",
    "PermissionFact",
    "Stage",
    "accepted_answer",
    "result_failure",
]

Stage = Literal["query-start", "query-run", "process", "teardown"]

SDK_ERROR_SUBTYPES: Final = frozenset(
    {
        "error_during_execution",
        "error_max_turns",
        "error_max_budget_usd",
        "error_max_structured_output_retries",
    }
)
"""The pinned SDK's error subtypes; each is preserved exactly as the category."""

FIXED_CATEGORIES: Final = frozenset(
    {"invalid-success", "missing-result", "process-exit", "unknown"}
)


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


class ClaudeRunFailure(Exception):
    """A classified run failure; its message is the safe line only.

    Attributes:
        stage: Where it failed.
        category: An SDK subtype or a fixed category.
        http_status: Numeric HTTP status reported by the product, if any.
        exit_code: The CLI's observed exit code, if any.
        signal: The CLI's observed terminating signal name, if any.
    """

    def __init__(
        self,
        stage: Stage,
        category: str,
        *,
        http_status: int | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
    ) -> None:
        self.stage = stage
        self.category = category
        self.http_status = http_status
        self.exit_code = exit_code
        self.signal = signal
        super().__init__(self.diagnostic())

    def with_outcome(self, exit_code: int | None, signal: str | None) -> ClaudeRunFailure:
        """A copy carrying the observed process outcome."""
        return ClaudeRunFailure(
            self.stage,
            self.category,
            http_status=self.http_status,
            exit_code=exit_code,
            signal=signal,
        )

    def diagnostic(self, permission: PermissionFact | None = None) -> str:
        """The safe line, followed by a contributing permission fact."""
        return format_product_failure(
            ProductFailure(
                product=PRODUCT,
                stage=self.stage,
                category=self.category,
                http_status=self.http_status,
                exit_code=self.exit_code,
                signal=self.signal,
            ),
            None if permission is None else permission.line(),
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


def result_failure(message: ResultMessage) -> ClaudeRunFailure:
    """Classify a result message that is not a strict success (stage ``query-run``).

    A known SDK subtype is kept exactly; an error-marked or blank ``success`` (the SDK
    reports HTTP failures this way) is ``invalid-success`` with the numeric
    ``api_error_status``; any other subtype is ``unknown`` and its value is not copied.
    """
    subtype = message.subtype
    if isinstance(subtype, str) and subtype in SDK_ERROR_SUBTYPES:
        return ClaudeRunFailure("query-run", subtype)
    if subtype == "success":
        return ClaudeRunFailure(
            "query-run", "invalid-success", http_status=_http_status(message.api_error_status)
        )
    return ClaudeRunFailure("query-run", "unknown")
