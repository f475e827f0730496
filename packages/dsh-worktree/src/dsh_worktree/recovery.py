"""Worktrees whose owner died: listed, recovered (committed, removed), pruned.

A host killed mid-run leaves its worktree locked with a reason naming the dead owner
(see :mod:`dsh_worktree.owner`). :func:`recover` — run by every isolated start on the
repository, and by ``dsh worktrees recover REPO`` — commits what such a worktree holds
onto its branch with the run recorded as ``abandoned``, removes it, and deletes the
branch when nothing had changed. A worktree that some live process still works in is
left for a later recovery; one owned by another host is never touched.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Final, Literal

import psutil

from dsh_worktree._git import git, git_executable
from dsh_worktree.errors import WorktreeError
from dsh_worktree.lifecycle import (
    ActiveWorktree,
    admin_dir,
    collected_tip,
    commit_all,
    delete_branch_locked,
    is_ready,
    ready_run_id,
    ready_task,
    remove_locked,
)
from dsh_worktree.owner import Owner, OwnerState, parse_reason
from dsh_worktree.repo import Repository, git_retrying, open_repository, repository_lock

__all__ = [
    "OwnedWorktree",
    "Recovered",
    "announce_recovered",
    "list_worktrees",
    "prune",
    "recover",
    "recover_repository",
]

_log = logging.getLogger("dsh_worktree")

_WORKTREE_LOCKS: Final = ("index.lock", "HEAD.lock")

RECOVERED_AS = "abandoned"
"""How a recovered run is recorded in its commit message (``Run ended: abandoned``)."""


@dataclass(frozen=True, slots=True)
class OwnedWorktree:
    """A worktree dsh-worktree created and still holds locked.

    Attributes:
        path: The worktree's directory.
        branch: Its branch (``None`` when detached).
        owner: The owning process and the delegation.
        state: ``live``, ``abandoned`` (its owner is gone) or ``foreign`` (another host's).
        missing: The directory no longer exists.
    """

    path: str
    branch: str | None
    owner: Owner
    state: OwnerState
    missing: bool


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover` did with one abandoned worktree.

    Attributes:
        path: The worktree's directory (now removed, unless ``action`` is ``busy``).
        branch: Its branch.
        commit: The tip holding its changes, or ``None`` when there were none (the
            branch was deleted).
        action: ``committed``, ``empty`` (nothing changed), ``discarded`` (it was still
            being created: no run had used it), ``pruned`` (its directory was gone) or
            ``busy`` (a live process still works in it; left for later).
    """

    path: str
    branch: str | None
    commit: str | None
    action: Literal["committed", "empty", "discarded", "pruned", "busy"]


def _is_dir(path: str) -> bool:
    return os.path.isdir(path)


async def _listed(repo: Repository) -> list[OwnedWorktree]:
    result = await git(repo.toplevel, "worktree", "list", "--porcelain", "-z", executable=repo.git)
    if not result.ok:
        raise WorktreeError(f"git worktree list failed: {result.first_line()}")
    owned: list[OwnedWorktree] = []
    for block in result.stdout.split("\0\0"):
        fields: dict[str, str] = {}
        for item in block.strip("\0").split("\0"):
            key, _, value = item.partition(" ")
            fields[key] = value
        owner = parse_reason(fields.get("locked", ""))
        if "worktree" not in fields or owner is None:
            continue
        branch = fields.get("branch")
        owned.append(
            OwnedWorktree(
                path=fields["worktree"],
                branch=branch.removeprefix("refs/heads/") if branch else None,
                owner=owner,
                state=owner.state(),
                missing="prunable" in fields or not _is_dir(fields["worktree"]),
            )
        )
    return owned


async def list_worktrees(repo: Repository) -> list[OwnedWorktree]:
    """Every worktree of ``repo`` that dsh-worktree holds locked, with its owner's state."""
    return await _listed(repo)


def _in_use(path: str) -> bool:
    prefix = os.path.realpath(path).rstrip("/") + "/"
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd")
        if isinstance(cwd, str) and (cwd + "/").startswith(prefix):
            return True
    return False


def _take_over_locks(repo: Repository, item: OwnedWorktree) -> None:
    """Remove the lock files a git command of the dead owner left (its worktree's index
    and ``HEAD``, its branch): nobody else writes them, and no live process works in the
    worktree (checked by the caller), so their holder is provably gone."""
    admin = admin_dir(item.path)
    paths = [os.path.join(admin, name) for name in _WORKTREE_LOCKS] if admin else []
    if item.branch:
        ref = os.path.join(repo.common_dir, "refs", "heads", *item.branch.split("/"))
        paths.append(ref + ".lock")
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise WorktreeError(f"cannot remove the stale lock {path}: {exc.strerror}") from None
        _log.warning(
            "took over %s, left by a git command of pid %d on %s, which is gone",
            path,
            item.owner.pid,
            item.owner.host,
        )


async def _recover_one(repo: Repository, item: OwnedWorktree) -> Recovered:
    base = item.owner.base
    branch = item.branch
    if item.missing:
        await remove_locked(repo, item.path)
        if branch is not None and not item.owner.continues:
            await delete_branch_locked(repo, branch, base)
        return Recovered(item.path, branch, None, "pruned")
    if _in_use(item.path):
        return Recovered(item.path, branch, None, "busy")
    _take_over_locks(repo, item)
    collected = collected_tip(item.path)
    if collected is not None and branch is not None:
        # Its run was committed; the owner died while removing it (files may be gone).
        await remove_locked(repo, item.path)
        if collected == base:
            if not item.owner.continues:
                await delete_branch_locked(repo, branch, base)
            return Recovered(item.path, branch, None, "empty")
        return Recovered(item.path, branch, collected, "committed")
    if branch is None or not is_ready(item.path):
        await remove_locked(repo, item.path)
        if branch is not None and not item.owner.continues:
            await delete_branch_locked(repo, branch, base)
        return Recovered(item.path, branch, None, "discarded")
    # A warm pool's worktree names its current delegation in the ready marker.
    run_id = ready_run_id(item.path) or item.owner.id
    task = ready_task(item.path)
    active = ActiveWorktree(
        repo, item.path, branch, base, run_id, False, task, owns_branch=not item.owner.continues
    )
    tip = await commit_all(active, "unknown (recovered)", RECOVERED_AS)
    await remove_locked(repo, item.path)
    if tip == base:
        if not item.owner.continues:
            await delete_branch_locked(repo, branch, base)
        return Recovered(item.path, branch, None, "empty")
    return Recovered(item.path, branch, tip, "committed")


async def recover(repo: Repository) -> list[Recovered]:
    """Commit and remove every abandoned worktree of ``repo`` (under the repository lock).

    Raises:
        WorktreeError: git failed for one of them (the others are still recovered; the
            failed one stays, locked, for the next attempt).
    """
    done: list[Recovered] = []
    failures: list[str] = []
    async with repository_lock(repo):
        for item in await _listed(repo):
            if item.state != "abandoned":
                continue
            try:
                done.append(await _recover_one(repo, item))
            except WorktreeError as exc:
                failures.append(f"{item.path}: {exc.message}")
    if failures:
        raise WorktreeError("recovery failed for " + "; ".join(failures))
    return done


def announce_recovered(done: list[Recovered]) -> None:
    """One warning line per abandoned worktree a run (or a warm pool) recovered on its
    way: what it did on the user's behalf is never silent."""
    for item in done:
        if item.action == "committed":
            _log.warning(
                "recovered %s, left by a run whose host died: its changes are on branch %s",
                item.path,
                item.branch,
            )
        elif item.action != "busy":
            _log.warning("recovered %s, left by a run whose host died: nothing to keep", item.path)


def _absolute(path: str) -> str:
    return os.path.abspath(path)  # lexical only


async def recover_repository(path: str) -> tuple[Repository, list[Recovered]]:
    """:func:`recover` for the repository ``path`` is in.

    Raises:
        WorktreeError: ``path`` is not in a non-bare repository, or recovery failed.
    """
    repo = await open_repository(_absolute(path), git_executable())
    return repo, await recover(repo)


async def prune(repo: Repository) -> list[Recovered]:
    """:func:`recover`, then ``git worktree prune`` (records of vanished unlocked worktrees)."""
    done = await recover(repo)
    async with repository_lock(repo):
        await git_retrying(repo, repo.toplevel, "worktree", "prune")
    return done
