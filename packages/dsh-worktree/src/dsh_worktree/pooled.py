"""The git steps one pooled worktree goes through between runs (see :mod:`dsh_worktree.pool`).

Each step looks at or changes one worktree only; which worktree, when, and what follows
is the pool's business.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from dsh_worktree._git import GitResult
from dsh_worktree._refs import branch_commit, detach_and_delete, head_target
from dsh_worktree.lifecycle import ActiveWorktree, admin_dir
from dsh_worktree.repo import Repository, git_retrying

__all__ = [
    "FRESH_ADMIN_ENTRIES",
    "detach",
    "left_as_claimed",
    "reset_to_base",
    "status_unchanged",
    "switch_to_new_branch",
]

_log = logging.getLogger("dsh_worktree")

FRESH_ADMIN_ENTRIES: Final = frozenset(
    {
        "HEAD",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "AUTO_MERGE",
        "COMMIT_EDITMSG",
        "commondir",
        "gitdir",
        "index",
        "locked",
        "logs",
        "dsh-worktree-ready",
    }
)
"""What a worktree's git administrative directory may hold for it to be reused; anything
else (``MERGE_HEAD``, ``rebase-merge``, ``BISECT_LOG``, ``refs``, ``config.worktree``,
``info/sparse-checkout``...) is state a fresh worktree does not have."""


def _admin_entries(path: str) -> set[str] | None:
    admin = admin_dir(path)
    try:
        return set(os.listdir(admin)) if admin is not None else None
    except OSError:
        return None


def left_as_claimed(active: ActiveWorktree) -> bool:
    """Whether ``HEAD`` still names the run's branch and the branch is still at the base,
    read from git's files (``False`` when they cannot tell: git status decides then)."""
    admin = admin_dir(active.path)
    ref = f"refs/heads/{active.branch}"
    if admin is None or head_target(admin) != ref:
        return False
    return branch_commit(active.repo.common_dir, ref) == active.base


def _status_says_unchanged(stdout: str, base: str, branch: str) -> bool:
    heads: dict[str, str] = {}
    for entry in stdout.split("\0"):
        if not entry:
            continue
        if not entry.startswith("# "):
            return False  # a changed, deleted, unmerged or untracked path
        key, _, value = entry[2:].partition(" ")
        heads[key] = value
    return heads.get("branch.oid") == base and heads.get("branch.head") == branch


async def switch_to_new_branch(repo: Repository, slot: ActiveWorktree, branch: str) -> GitResult:
    """The branch created at the worktree's ``HEAD`` and checked out: no file touched."""
    return await git_retrying(repo, slot.path, "switch", "--quiet", "--create", branch)


async def status_unchanged(active: ActiveWorktree) -> bool:
    """One ``git status`` over the worktree: nothing changed, ``HEAD`` on the branch at
    the base."""
    status = await git_retrying(
        active.repo,
        active.path,
        # Directories whose mtime did not change are not read again: git's untracked
        # cache, kept in this worktree's own index (the user's configuration is not
        # changed). It halves this look on a large tree.
        "-c",
        "core.untrackedCache=true",
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=normal",
        "--ignore-submodules=none",
        "--no-renames",
    )
    return status.ok and _status_says_unchanged(status.stdout, active.base, active.branch)


async def detach(active: ActiveWorktree, *, delete_branch: bool) -> bool:
    """``HEAD`` detached at the base (and the branch deleted), as one ref transaction.

    It names the worktree's ``HEAD`` as ``worktrees/<id>/HEAD`` from the main tree:
    git refuses to update ``HEAD`` and its own referent in one transaction.
    """
    admin = admin_dir(active.path)
    if admin is None:
        return False
    if delete_branch:
        ref = f"refs/heads/{active.branch}"
        try:
            # The common case, as git would do it with its own lock files, without
            # starting git; anything unusual answers False and git does it below.
            if detach_and_delete(admin, active.repo.common_dir, ref, active.base):
                return True
        except OSError as exc:
            _log.info("dsh-worktree: detaching %s by its files failed: %s", active.path, exc)
    script = f"update worktrees/{os.path.basename(admin)}/HEAD {active.base}\n"
    if delete_branch:
        script += f"delete refs/heads/{active.branch} {active.base}\n"
    done = await git_retrying(
        active.repo,
        active.repo.toplevel,
        "update-ref",
        "--no-deref",
        "--stdin",
        stdin=script.encode(),
    )
    if not done.ok:
        _log.warning("dsh-worktree: detaching %s failed: %s", active.path, done.first_line())
    return done.ok


async def reset_to_base(slot: ActiveWorktree) -> bool:
    """The worktree back to exactly the base's tree; ``False`` when it cannot be reused
    (a reset failed, or its administrative directory holds state a fresh one does not)."""
    repo, path = slot.repo, slot.path
    for args in (("reset", "--quiet", "--hard", slot.base), ("clean", "-ffdxq")):
        done = await git_retrying(repo, path, *args)
        if not done.ok:
            _log.warning("dsh-worktree: resetting %s failed: %s", path, done.first_line())
            return False
    entries = _admin_entries(path)
    if entries is None or not entries <= FRESH_ADMIN_ENTRIES:
        _log.info(
            "dsh-worktree: %s holds git state a fresh worktree does not (%s): removed",
            path,
            ", ".join(sorted((entries or set()) - FRESH_ADMIN_ENTRIES)) or "no .git",
        )
        return False
    return True
