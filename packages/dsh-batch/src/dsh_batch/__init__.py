"""dsh-batch: many delegations from a list of tasks, on this machine or on a Ray cluster.

:func:`run_batch` runs a batch from Python and returns the records; ``dsh batch`` (in
dsh-cli) is a command over the same engine. The Ray parts need the ``ray`` extra and
import Ray only when a batch runs on it: the actor pool (:mod:`dsh_batch.ray_pool`), the
local cluster (:mod:`dsh_batch.ray_cluster`) and the Ray Data step
(:class:`dsh_batch.ray_data.Delegate`).
"""

from __future__ import annotations

from dsh_batch.api import BatchFailedError, BatchSettings, run_batch
from dsh_batch.engine import FILES_PLACEHOLDER, Interrupts
from dsh_batch.events import (
    BatchCounts,
    BatchEvent,
    BatchObserver,
    Notice,
    TaskLeft,
    TaskSettled,
    TaskStarted,
)
from dsh_batch.files import BadLine, BatchRecord, BatchTask, ResultsFile, TaskList, read_tasks

__all__ = [
    "FILES_PLACEHOLDER",
    "BadLine",
    "BatchCounts",
    "BatchEvent",
    "BatchFailedError",
    "BatchObserver",
    "BatchRecord",
    "BatchSettings",
    "BatchTask",
    "Interrupts",
    "Notice",
    "ResultsFile",
    "TaskLeft",
    "TaskList",
    "TaskSettled",
    "TaskStarted",
    "read_tasks",
    "run_batch",
]
