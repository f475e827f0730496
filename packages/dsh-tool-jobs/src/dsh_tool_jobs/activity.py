"""What the model may learn of a running background job's progress: safe categories only.

A subagent run's progress carries product text (assistant text, command text, file
paths). None of it may reach a model-facing text. ``job_list`` may show a job's elapsed
time, its token count and its last activity as a *category*: the event kind, for a tool
event the coarse tool kind and the tool's name, and nothing else. A tool name is shown
only when it is a plain identifier (letters, digits, ``_ . -``, at most
:data:`TOOL_NAME_LIMIT` characters); anything else (a title with spaces, a path) is left
out, so a product that puts a command into a tool's name cannot leak it either.
"""

from __future__ import annotations

import re
from typing import Final

from dsh_subagent import ProgressEvent, ToolFinished, ToolStarted, Usage, UsageUpdated
from pydantic import BaseModel, ConfigDict, NonNegativeInt

__all__ = ["TOOL_KINDS", "TOOL_NAME_LIMIT", "ActivityTracker", "JobActivity"]

TOOL_KINDS: Final = frozenset(
    {"command", "file-edit", "file-read", "search", "web", "mcp", "agent", "other"}
)
"""The provider-neutral tool kinds; any other reported kind is shown as ``other``."""

TOOL_NAME_LIMIT: Final = 64
_TOOL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


class JobActivity(BaseModel):
    """A background job's progress as the model may see it.

    Attributes:
        last: The kind of the latest activity (``turn-started``, ``assistant-text``,
            ``tool-started``, ``tool-finished``, ``file-changed``, ``plan-updated``).
        tool_kind: For a tool event, its coarse kind (one of :data:`TOOL_KINDS`).
        tool: For a tool event, the tool's name when it is a plain identifier.
        tokens: Tokens so far (input plus output) as the product reported them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    last: str | None = None
    tool_kind: str | None = None
    tool: str | None = None
    tokens: NonNegativeInt | None = None

    def describe(self) -> str | None:
        """``tool-started command Bash``, ``assistant-text``, ...; ``None`` before any."""
        if self.last is None:
            return None
        return " ".join(part for part in (self.last, self.tool_kind, self.tool) if part)


def _tokens(usage: Usage) -> int | None:
    if usage.total_tokens is not None:
        return usage.total_tokens
    return usage.input_tokens if usage.input_tokens is not None else usage.output_tokens


def _safe_tool_name(name: str) -> str | None:
    if len(name) <= TOOL_NAME_LIMIT and _TOOL_NAME.fullmatch(name):
        return name
    return None


class ActivityTracker:
    """Keeps the :class:`JobActivity` of one run; a progress listener (never raises)."""

    def __init__(self) -> None:
        self._activity = JobActivity()

    def observe(self, event: ProgressEvent) -> None:
        """Take in one progress event (the listener)."""
        current = self._activity
        if isinstance(event, UsageUpdated):
            self._activity = current.model_copy(update={"tokens": _tokens(event.usage)})
        elif isinstance(event, ToolStarted | ToolFinished):
            kind = event.tool_kind if event.tool_kind in TOOL_KINDS else "other"
            self._activity = JobActivity(
                last=event.kind,
                tool_kind=kind,
                tool=_safe_tool_name(event.name),
                tokens=current.tokens,
            )
        else:
            self._activity = JobActivity(last=event.kind, tokens=current.tokens)

    def snapshot(self) -> JobActivity:
        """The activity so far."""
        return self._activity
