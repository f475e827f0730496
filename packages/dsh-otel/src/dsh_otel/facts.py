"""The only facts of a run that may become telemetry, each read from a closed shape.

Everything exported is built here from values whose shape cannot carry product text: the
provider's registered name, the stop reason, usage numbers, progress *kinds*, and the
allowlisted fields of the fixed product failure line (``diagnostic:fixed-line``). Free
text (task, answer, diagnostic prose, tool input, command lines, paths) never passes: a
value that does not match its token shape is dropped, not cleaned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from dsh_subagent import DEADLINE_EXCEEDED, IDLE_TIMEOUT, SubagentError

__all__ = [
    "FailureFacts",
    "error_type",
    "failure_facts",
    "gen_ai_provider",
    "safe_token",
]

# Short identifiers only: provider instance names, stop reasons, tool names, categories.
_TOKEN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

# The fixed line, strictly: every field is optional but the order and the wording are not.
_LINE: Final = re.compile(
    r"Product subagent failure \(product: (?P<product>[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}); "
    r"stage: (?P<stage>[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63})"
    r"(?:; category: (?P<category>[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}))?"
    r"(?:; HTTP status: (?P<http_status>\d{3}))?"
    r"(?:; exit code: (?P<exit_code>-?\d{1,5}))?"
    r"(?:; signal: (?P<signal>SIG[A-Z0-9]{1,12}))?\)"
)

# Which GenAI "provider" (the model vendor) a built-in product talks to by default.
_GEN_AI_PROVIDERS: Final = {"codex": "openai", "claude-code": "anthropic"}

BUDGET_CATEGORIES: Final = frozenset({DEADLINE_EXCEEDED, IDLE_TIMEOUT})


def safe_token(value: object) -> str | None:
    """``value`` when it is a short identifier, else ``None`` (never a cleaned copy)."""
    if isinstance(value, str) and _TOKEN.fullmatch(value):
        return value
    return None


def gen_ai_provider(kind: str | None) -> str | None:
    """The ``gen_ai.provider.name`` for a built-in product kind, ``None`` when unknown."""
    return _GEN_AI_PROVIDERS.get(kind or "")


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """The allowlisted fields of a fixed product failure line."""

    product: str
    stage: str
    category: str | None = None
    http_status: int | None = None
    exit_code: int | None = None
    signal: str | None = None

    @property
    def budget_outcome(self) -> str | None:
        """``deadline-exceeded`` / ``idle-timeout`` when a run budget ended the run."""
        return self.category if self.category in BUDGET_CATEGORIES else None


def failure_facts(diagnostic: str | None) -> FailureFacts | None:
    """Parse the first line of ``diagnostic`` if (and only if) it is the fixed line."""
    if not diagnostic:
        return None
    match = _LINE.fullmatch(diagnostic.split("\n", 1)[0])
    if match is None:
        return None
    status = match.group("http_status")
    code = match.group("exit_code")
    return FailureFacts(
        product=match.group("product"),
        stage=match.group("stage"),
        category=match.group("category"),
        http_status=int(status) if status is not None else None,
        exit_code=int(code) if code is not None else None,
        signal=match.group("signal"),
    )


def error_type(error: BaseException) -> str:
    """``error.type`` for a raised error: its stable code, or its class name."""
    if isinstance(error, SubagentError):
        return str(error.code)
    return type(error).__qualname__
