"""ACP ``stopReason`` → subagent stop reason."""

from __future__ import annotations

from typing import Final

from dsh_subagent import ABORTED, COMPLETED, ERROR, MAX_TOKENS, REFUSAL

__all__ = ["MAX_TURN_REQUESTS_CATEGORY", "map_stop_reason"]

MAX_TURN_REQUESTS_CATEGORY: Final = "max-turn-requests"
"""Diagnostic category of a turn the agent ended at its own request limit."""

_MAPPING: Final[dict[str, str]] = {
    "end_turn": COMPLETED,
    "max_tokens": MAX_TOKENS,
    "refusal": REFUSAL,
    # ``cancelled`` is the agent acknowledging a parent-driven ``session/cancel``: the
    # subagent word for that is ``aborted``. This deliberately differs from Codex, whose
    # ``interrupted`` is not parent-driven and settles ``error`` (``settlement:cancel-mid-run``).
    "cancelled": ABORTED,
    "max_turn_requests": ERROR,
}


def map_stop_reason(acp_stop_reason: str) -> str:
    """Map one ACP stop reason to the subagent vocabulary.

    Args:
        acp_stop_reason: ``PromptResponse.stopReason`` as the agent sent it.

    Returns:
        ``completed``, ``max-tokens``, ``refusal``, ``aborted`` or ``error``; any value
        this table does not know is ``error``.
    """
    return _MAPPING.get(acp_stop_reason, ERROR)
