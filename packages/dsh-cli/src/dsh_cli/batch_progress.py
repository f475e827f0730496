"""What ``dsh batch`` shows while it runs: a live bar on a terminal, plain lines otherwise.

It renders the batch engine's progress events (:mod:`dsh_batch.events`). On a TTY a
``rich`` progress bar shows tasks settled out of the total, done / failed / running
counts, elapsed time and an ETA. Elsewhere (a log file, CI) each settled task is one
line: ``dsh: [3/10] issue-17: completed in 4.2s``. Both go to stderr; the records
themselves go only to the results file.
"""

from __future__ import annotations

from types import TracebackType
from typing import TextIO

from dsh_batch.events import BatchCounts, BatchEvent, Notice, TaskSettled
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["BatchDisplay"]

_COUNTS = "done {task.fields[done]} · failed {task.fields[failed]} · running {task.fields[running]}"


class BatchDisplay(BatchCounts):
    """Counts of one batch, shown as a live bar (``live=True``) or as plain lines.

    Args:
        total: Tasks this run will settle (skipped ones are not counted).
        err: Where to show it.
        live: A live bar; default: whether ``err`` is a terminal.
    """

    def __init__(self, total: int, err: TextIO, *, live: bool | None = None) -> None:
        super().__init__(total)
        self._err = err
        self._live = err.isatty() if live is None else live
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> BatchDisplay:
        if self._live:
            self._progress = Progress(
                TextColumn("dsh batch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(_COUNTS),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self._err),
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._task = self._progress.add_task(
                "batch", total=self.total, done=0, failed=0, running=0
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._refresh()
            self._progress.stop()
            self._progress = None

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task,
                completed=self.settled,
                done=self.done,
                failed=self.failed,
                running=self.running,
            )

    def event(self, event: BatchEvent) -> None:
        """Show one event of the engine (the observer ``dsh batch`` gives it)."""
        if isinstance(event, Notice):
            self.message(f"dsh: {event.text}")
            return
        self.apply(event)
        if self._progress is not None:
            self._refresh()
        elif isinstance(event, TaskSettled):
            record = event.record
            print(
                f"dsh: [{self.settled}/{self.total}] {record.id}: {record.stop_reason} "
                f"in {record.elapsed_seconds:.1f}s",
                file=self._err,
                flush=True,
            )

    def message(self, line: str) -> None:
        """A line above the bar (or a plain line)."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self._err, flush=True)
