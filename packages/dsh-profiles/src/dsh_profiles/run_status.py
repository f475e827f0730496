"""The status of one run as its events arrive: what it is doing now, its tokens, its clock.

:class:`RunStatus` folds :func:`~dsh_profiles.run.run_task`'s events into the three
things a person watching a run wants: the current activity (``starting``,
``turn started``, ``writing``, ``running Bash``, ``editing src/app.py``, ...), the tokens
the product reported so far, and the time since the product was started (frozen once the
run settled). ``dsh run`` draws it on stderr; a harness may show it its own way.

Progress is what the product said (nothing here is synthesised). Product text (a tool
name, a path) enters an activity cleaned by :func:`clean_field`: control characters
become spaces and it is cut to :data:`FIELD_LIMIT` characters, so it is always one line.
"""

from __future__ import annotations

import time
from typing import Final

from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)

from dsh_profiles.run import RunEvent, RunNotice, RunPublished, RunSettled, RunStarting

__all__ = ["FIELD_LIMIT", "RunStatus", "activity", "clean_field"]

FIELD_LIMIT: Final = 120
"""Characters of one product-given field (a tool name, a path) shown in one line."""


def clean_field(text: str) -> str:
    """``text`` on one line: control characters become spaces, cut to the limit."""
    cleaned = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(cleaned) > FIELD_LIMIT:
        cleaned = cleaned[: FIELD_LIMIT - 1] + "…"
    return cleaned or "?"


def activity(event: ProgressEvent) -> str | None:
    """The current activity an event announces; ``None`` when it announces none (usage)."""
    if isinstance(event, TurnStarted):
        return "turn started"
    if isinstance(event, AssistantText):
        return "writing"
    if isinstance(event, ToolStarted):
        return f"running {clean_field(event.name)}"
    if isinstance(event, ToolFinished):
        return f"finished {clean_field(event.name)}"
    if isinstance(event, FileChanged):
        return f"editing {clean_field(event.path)}"
    if isinstance(event, PlanUpdated):
        return f"planning ({len(event.steps)} steps)"
    return None


class RunStatus:
    """Where one run is, from its events (:meth:`apply`).

    Attributes:
        activity: What the run is doing now, or its outcome once settled (``completed``,
            ``error``, ``could not start``, ...).
        usage: The tokens the product reported last, or ``None``.
    """

    def __init__(self) -> None:
        self._began = time.monotonic()
        self._settled_at: float | None = None
        self.activity = "starting"
        self.usage: Usage | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since the product was started (frozen once the run settled)."""
        end = self._settled_at if self._settled_at is not None else time.monotonic()
        return end - self._began

    @property
    def settled(self) -> bool:
        """Whether the run ended."""
        return self._settled_at is not None

    def apply(self, event: RunEvent) -> None:
        """Fold one event in (a :class:`~dsh_profiles.run.RunNotice` changes nothing)."""
        if isinstance(event, RunNotice):
            return
        if isinstance(event, RunStarting):
            self._began = time.monotonic()
        elif isinstance(event, RunPublished):
            self.activity = "waiting for the product"
        elif isinstance(event, RunSettled):
            if self._settled_at is None:
                self._settled_at = time.monotonic()
            self.activity = event.outcome
        else:
            now = activity(event)
            if now is not None:
                self.activity = now
            if isinstance(event, UsageUpdated):
                self.usage = event.usage
