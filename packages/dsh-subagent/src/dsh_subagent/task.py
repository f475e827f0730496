"""Admission of a one-shot task for an out-of-process product.

A product child receives text only, and an empty or blank task is refused before any
process starts: a clear error, and zero processes.
"""

from __future__ import annotations

from collections.abc import Sequence

from dsh_subagent.errors import SubagentError, SubagentErrorCode
from dsh_subagent.types import ContentBlock

__all__ = ["one_shot_task_texts"]


def one_shot_task_texts(prefix: str, prompt: Sequence[ContentBlock]) -> list[str]:
    """The texts of a one-shot task's blocks, in order.

    Args:
        prefix: The provider's message prefix (e.g. ``subagent-codex``).
        prompt: The request's prompt blocks.

    Raises:
        SubagentError: ``INVALID_REQUEST`` when the prompt is empty, holds a non-text
            block, or has no non-blank text.
    """
    if not prompt or any(getattr(block, "type", None) != "text" for block in prompt):
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            f"{prefix}: the one-shot task must contain only text blocks",
        )
    texts = [block.text for block in prompt]
    if not any(text.strip() for text in texts):
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST, f"{prefix}: the one-shot task must not be empty"
        )
    return texts
