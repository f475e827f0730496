"""Progress of a batch as events: what a display, a log or a test consumes.

The engine never renders anything: it calls an observer with one event per change (a
task started, a task settled with its record, a task left without a record, a notice
line), and :class:`BatchCounts` keeps the counts every consumer needs. The ``dsh``
command renders these events as a bar or as plain lines; a Python caller may pass any
callable, or none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dsh_subagent import COMPLETED

from dsh_batch.files import BatchRecord

__all__ = [
    "BatchCounts",
    "BatchEvent",
    "BatchObserver",
    "Notice",
    "TaskLeft",
    "TaskSettled",
    "TaskStarted",
]


@dataclass(frozen=True)
class TaskStarted:
    """A task was handed to a product (locally) or to an actor (on Ray)."""

    id: str


@dataclass(frozen=True)
class TaskSettled:
    """A task settled; its record was appended to the results."""

    record: BatchRecord


@dataclass(frozen=True)
class TaskLeft:
    """A running task ended without a record (the batch was interrupted, or its Ray actor
    died and the task goes to another actor): it runs again on resume or retry."""

    id: str


@dataclass(frozen=True)
class Notice:
    """A line worth showing the user (an interrupt being honoured, a retry on Ray, a
    warning); already phrased, never product text."""

    text: str


BatchEvent = TaskStarted | TaskSettled | TaskLeft | Notice
"""Everything an observer is called with."""

BatchObserver = Callable[[BatchEvent], None]
"""Called on the engine's thread with each event; it must not block for long."""


class BatchCounts:
    """The counts of one batch run, updated by :meth:`apply` for each event.

    Args:
        total: Tasks this run will settle (skipped ones are not counted).
        observer: Called with every event :meth:`emit` counts (``None``: nobody).
    """

    def __init__(self, total: int, observer: BatchObserver | None = None) -> None:
        self.total = total
        self._observer = observer
        self.done = 0
        self.failed = 0
        self.running = 0

    @property
    def settled(self) -> int:
        """Tasks settled so far (done and failed)."""
        return self.done + self.failed

    def apply(self, event: BatchEvent) -> None:
        """Count one event (a :class:`Notice` changes nothing)."""
        if isinstance(event, TaskStarted):
            self.running += 1
        elif isinstance(event, TaskLeft):
            self.running -= 1
        elif isinstance(event, TaskSettled):
            self.running -= 1
            if event.record.stop_reason == COMPLETED:
                self.done += 1
            else:
                self.failed += 1

    def emit(self, event: BatchEvent) -> None:
        """Count ``event``, then hand it to the observer."""
        self.apply(event)
        if self._observer is not None:
            self._observer(event)
