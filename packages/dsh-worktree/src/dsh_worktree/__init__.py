"""dsh-worktree: a git worktree per delegation, every change kept on its own branch.

Wrap any provider (``Worktree().isolate(provider)``, or ``delegate(...,
isolation=Worktree())``): each run works in a fresh worktree of the delegation's
repository on a new branch; after the run settles and its process tree has exited,
everything it changed is committed on that branch and the worktree is removed. The
result's ``changes`` says where. See docs/worktrees.md.
"""

import logging

from dsh_worktree.errors import WorktreeError
from dsh_worktree.lifecycle import COMMIT_AUTHOR, COMMIT_EMAIL, commit_message
from dsh_worktree.provider import Worktree, WorktreeProvider, WorktreeRun, preflight
from dsh_worktree.recovery import (
    OwnedWorktree,
    Recovered,
    list_worktrees,
    prune,
    recover,
    recover_repository,
)
from dsh_worktree.repo import Repository, open_repository
from dsh_worktree.settings import DEFAULT_BRANCH, MAX_WARM, WorktreeSettings, default_root
from dsh_worktree.task import TASK_TRAILER, for_task

logging.getLogger("dsh_worktree").addHandler(logging.NullHandler())

__all__ = [
    "COMMIT_AUTHOR",
    "COMMIT_EMAIL",
    "DEFAULT_BRANCH",
    "MAX_WARM",
    "TASK_TRAILER",
    "OwnedWorktree",
    "Recovered",
    "Repository",
    "Worktree",
    "WorktreeError",
    "WorktreeProvider",
    "WorktreeRun",
    "WorktreeSettings",
    "commit_message",
    "default_root",
    "for_task",
    "list_worktrees",
    "open_repository",
    "preflight",
    "prune",
    "recover",
    "recover_repository",
]
