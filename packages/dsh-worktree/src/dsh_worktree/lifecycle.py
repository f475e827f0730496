"""One worktree's life: created locked on a new branch, collected, removed.

Collection commits everything the run left (``git add -A``: modified, added and deleted
files, and untracked files that ``.gitignore`` does not exclude) on the worktree's
branch with a fixed message and author (:data:`COMMIT_AUTHOR`, :func:`commit_message`),
then removes the worktree. A run that changed nothing leaves no commit: its branch is
deleted. Work the product committed itself counts as changed too. If committing fails,
the worktree is kept (and marked abandoned, so a later recovery tries again): nothing
the product wrote is thrown away.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import uuid
from dataclasses import dataclass
from typing import Final

import anyio
from dsh_subagent import Changes

from dsh_worktree.errors import WorktreeError
from dsh_worktree.owner import Owner, current_owner
from dsh_worktree.repo import Repository, git_retrying, repository_lock
from dsh_worktree.settings import WorktreeSettings
from dsh_worktree.task import TASK_TRAILER, trailer_value

__all__ = [
    "COLLECTED_MARKER",
    "COMMIT_AUTHOR",
    "COMMIT_EMAIL",
    "READY_MARKER",
    "ActiveWorktree",
    "admin_dir",
    "check_root",
    "collect",
    "collected_tip",
    "commit_and_count",
    "commit_message",
    "create",
    "kept_for_recovery",
    "new_run_id",
    "ready_run_id",
    "ready_task",
    "repository_dir",
    "write_ready_marker",
]

_log = logging.getLogger("dsh_worktree")

COMMIT_AUTHOR: Final = "dsh-worktree"
COMMIT_EMAIL: Final = "dsh-worktree@localhost"
COLLECTED_MARKER: Final = "dsh-worktree-collected"
"""Written into the worktree's git administrative directory (naming the branch's tip)
once its run's changes are committed, before it is removed: a recovery after a death
during removal must not commit the half-removed tree as the run's deletions."""
READY_MARKER: Final = "dsh-worktree-ready"
"""Written into the worktree's git administrative directory once it is fully checked out;
a worktree without it was being created when its owner died and holds no run's work."""

_IDENTITY: Final = {
    "GIT_AUTHOR_NAME": COMMIT_AUTHOR,
    "GIT_AUTHOR_EMAIL": COMMIT_EMAIL,
    "GIT_COMMITTER_NAME": COMMIT_AUTHOR,
    "GIT_COMMITTER_EMAIL": COMMIT_EMAIL,
}
_SUBMODULES_SAID: set[str] = set()
_SHORTSTAT: Final = re.compile(r"(\d+) (file|insertion|deletion)")


def new_run_id() -> str:
    """A fresh delegation id: 12 hex digits."""
    return uuid.uuid4().hex[:12]


def repository_dir(root: str, repo: Repository) -> str:
    """The directory under ``root`` that holds one repository's worktrees."""
    digest = hashlib.sha256(repo.common_dir.encode()).hexdigest()[:8]
    name = os.path.basename(repo.toplevel.rstrip("/")) or "repo"
    return os.path.join(root, f"{name}-{digest}")


def commit_message(
    run_id: str, provider: str, ended: str, base: str, task: str | None = None
) -> str:
    """The fixed message of the commit that keeps a run's changes.

    With ``task`` (see :func:`dsh_worktree.for_task`) the message ends with the git
    trailer ``Dsh-Task: <task>`` (``git log --format='%(trailers:key=Dsh-Task)'``).
    """
    message = (
        f"dsh: changes of delegation {run_id} ({ended})\n\n"
        "Everything the delegated run left in its worktree, committed by dsh-worktree\n"
        "after the run settled and its process tree had exited.\n\n"
        f"Delegation: {run_id}\nProvider: {provider}\nRun ended: {ended}\nBase: {base}\n"
    )
    if task is not None:
        message += f"\n{TASK_TRAILER}: {trailer_value(task)}\n"
    return message


@dataclass(frozen=True, slots=True)
class ActiveWorktree:
    """A created worktree and what it is for."""

    repo: Repository
    path: str
    branch: str
    base: str
    run_id: str
    keep: bool
    task: str | None = None
    """The task the run is for (:func:`dsh_worktree.for_task`), named on its commit."""
    owns_branch: bool = True
    """The branch was made for this run (deleted when it holds nothing new); ``False``
    for a follow-up on an earlier run's branch, which always stays."""

    def child_cwd(self) -> str:
        """Where the product works: the worktree's counterpart of the delegation's cwd."""
        return os.path.join(self.path, self.repo.prefix) if self.repo.prefix else self.path


def admin_dir(path: str) -> str | None:
    """The worktree's git administrative directory (from its ``.git`` file)."""
    try:
        with open(os.path.join(path, ".git"), encoding="utf-8") as handle:
            line = handle.read().strip()
    except OSError:
        return None
    return line.removeprefix("gitdir: ") if line.startswith("gitdir: ") else None


def is_ready(path: str) -> bool:
    """Whether the worktree at ``path`` was fully created (its ready marker exists)."""
    admin = admin_dir(path)
    return admin is not None and os.path.exists(os.path.join(admin, READY_MARKER))


def _ready_lines(path: str) -> list[str]:
    admin = admin_dir(path)
    if admin is None:
        return []
    try:
        with open(os.path.join(admin, READY_MARKER), encoding="utf-8") as handle:
            return handle.read(4096).splitlines()
    except OSError:
        return []


def ready_run_id(path: str) -> str | None:
    """The delegation id the worktree's ready marker names (``None`` without a marker)."""
    lines = _ready_lines(path)
    return (lines[0].strip() or None) if lines else None


def ready_task(path: str) -> str | None:
    """The task the worktree's ready marker names (its second line), or ``None``."""
    lines = _ready_lines(path)
    return lines[1].removeprefix("task ") if len(lines) > 1 and lines[1] else None


def write_ready_marker(path: str, run_id: str, task: str | None = None) -> None:
    """Name ``run_id`` (and its ``task``) in the worktree's ready marker (a warm worktree
    claimed by a run; a recovery commits with them)."""
    admin = admin_dir(path)
    if admin is None:
        raise WorktreeError(f"no worktree at {path}")
    tail = f"task {trailer_value(task)}\n" if task is not None else ""
    with open(os.path.join(admin, READY_MARKER), "w", encoding="utf-8") as handle:
        handle.write(run_id + "\n" + tail)


def check_root(repo: Repository, root: str) -> None:
    """Refuse a worktree root inside the repository's working tree, or one that is not a
    directory this process can create or write (checked without creating anything).

    Raises:
        WorktreeError: naming the root.
    """
    real = os.path.realpath(root)
    if real == repo.toplevel or real.startswith(repo.toplevel.rstrip("/") + "/"):
        raise WorktreeError(
            f"the worktree root must be outside the repository's working tree: {root}"
        )
    existing = real
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise WorktreeError(f"the worktree root is not a directory: {root} ({existing} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise WorktreeError(f"the worktree root cannot be written: {root} ({existing})")


def _write_collected(active: ActiveWorktree, tip: str) -> None:
    admin = admin_dir(active.path)
    if admin is not None:
        with open(os.path.join(admin, COLLECTED_MARKER), "w", encoding="utf-8") as handle:
            handle.write(tip + "\n")


def collected_tip(path: str) -> str | None:
    """The tip the worktree's collected marker names: its run's changes are on the branch
    and only its removal was left (``None`` without the marker)."""
    admin = admin_dir(path)
    if admin is None:
        return None
    try:
        with open(os.path.join(admin, COLLECTED_MARKER), encoding="utf-8") as handle:
            tip = handle.read(256).strip()
    except OSError:
        return None
    return tip or None


def _prepare_parent(repo: Repository, settings: WorktreeSettings, run_id: str) -> str:
    check_root(repo, settings.root_dir())
    parent = repository_dir(settings.root_dir(), repo)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise WorktreeError(
            f"the worktree root cannot be written: {settings.root_dir()} ({exc.strerror})"
        ) from None
    return os.path.join(parent, run_id)


def _mark_ready(active: ActiveWorktree) -> None:
    if admin_dir(active.path) is None:
        raise WorktreeError(f"git worktree add left no worktree at {active.path}")
    write_ready_marker(active.path, active.run_id, active.task)
    os.makedirs(active.child_cwd(), exist_ok=True)
    if (
        active.branch
        and active.repo.common_dir not in _SUBMODULES_SAID
        and os.path.exists(os.path.join(active.path, ".gitmodules"))
    ):
        # Not initialised on purpose: fetching them could need the network and credentials.
        # Said once per repository and process (a batch would repeat it per worktree).
        _SUBMODULES_SAID.add(active.repo.common_dir)
        _log.warning(
            "the worktree %s leaves the repository's submodules uninitialised "
            "(git submodule update --init in it if the run needs them)",
            active.path,
        )


async def create(
    repo: Repository,
    settings: WorktreeSettings,
    base: str,
    branch: str | None,
    run_id: str,
    task: str | None = None,
    *,
    path: str | None = None,
    existing: bool = False,
) -> ActiveWorktree:
    """Create the worktree at ``base`` on the new ``branch``, locked by this process.

    ``branch=None`` creates it with a detached ``HEAD`` (a warm pool's idle worktree;
    its ``branch`` is then ``""``). ``existing=True`` checks out ``branch`` itself, which
    exists at ``base`` (a follow-up on an earlier run's branch), at ``path`` (default: a
    new directory named ``run_id`` under the root). A failure (or cancellation) part way removes
    whatever was created.

    Raises:
        WorktreeError: git refused (one line with git's reason).
    """
    fresh = _prepare_parent(repo, settings, run_id)
    path = path or fresh
    owner = current_owner(base, run_id, continues=existing)
    active = ActiveWorktree(
        repo, path, branch or "", base, run_id, settings.keep, task, owns_branch=not existing
    )
    if existing and branch is not None:
        where: tuple[str, ...] = (path, branch)  # checks out the earlier run's branch itself
    elif branch is not None:
        where = ("-b", branch, path, base)
    else:
        where = ("--detach", path, base)
    try:
        async with repository_lock(repo):
            added = await git_retrying(
                repo,
                repo.toplevel,
                "-c",
                "checkout.workers=0",  # parallel checkout (one worker per core)
                "worktree",
                "add",
                "--quiet",
                "--lock",
                "--reason",
                owner.reason(),
                *where,
            )
        if not added.ok:
            raise WorktreeError(f"git worktree add failed: {added.first_line()}")
        _mark_ready(active)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _discard(active)
        raise
    return active


async def _discard(active: ActiveWorktree) -> None:
    """Remove a worktree that holds no run's work, and its branch if it is still at base."""
    with contextlib.suppress(WorktreeError):
        async with repository_lock(active.repo):
            await remove_locked(active.repo, active.path)
            if active.branch and active.owns_branch:
                await delete_branch_locked(active.repo, active.branch, active.base)


def _present(path: str) -> bool:
    return os.path.lexists(path)


async def remove_locked(repo: Repository, path: str) -> None:
    """``git worktree remove --force --force`` (also when locked); the caller holds the lock."""
    if _present(path):
        removed = await git_retrying(
            repo, repo.toplevel, "worktree", "remove", "--force", "--force", path
        )
        if removed.ok:
            return
        _log.warning("dsh-worktree: removing %s failed: %s", path, removed.first_line())
    # The directory is gone (or could not be removed by git): drop git's record of it.
    await git_retrying(repo, repo.toplevel, "worktree", "unlock", path)
    await git_retrying(repo, repo.toplevel, "worktree", "prune")


async def delete_branch_locked(repo: Repository, branch: str, expected: str) -> None:
    """Delete ``branch`` only while it still points at ``expected``; the caller holds the lock."""
    await git_retrying(repo, repo.toplevel, "update-ref", "-d", f"refs/heads/{branch}", expected)


def _stat(text: str) -> tuple[int, int, int]:
    counts = {"file": 0, "insertion": 0, "deletion": 0}
    for number, kind in _SHORTSTAT.findall(text):
        counts[kind] = int(number)
    return counts["file"], counts["insertion"], counts["deletion"]


async def commit_all(active: ActiveWorktree, provider: str, ended: str) -> str:
    """Commit everything in the worktree on its branch; returns the branch's tip.

    Raises:
        WorktreeError: a git step failed (the worktree is left as it is).
    """
    repo, path = active.repo, active.path
    added = await git_retrying(repo, path, "add", "--all")
    if not added.ok:
        raise WorktreeError(f"git add failed: {added.first_line()}")
    staged = await git_retrying(repo, path, "diff", "--cached", "--quiet")
    if staged.code == 1:
        committed = await git_retrying(
            repo,
            path,
            "commit",
            "--quiet",
            "--no-verify",
            "--allow-empty-message",
            "-m",
            commit_message(active.run_id, provider, ended, active.base, active.task),
            env=_IDENTITY,
        )
        if not committed.ok:
            raise WorktreeError(f"git commit failed: {committed.first_line()}")
    elif not staged.ok:
        raise WorktreeError(f"git diff failed: {staged.first_line()}")
    heads = await git_retrying(repo, path, "rev-parse", "HEAD", f"refs/heads/{active.branch}")
    lines = heads.stdout.split()
    if not heads.ok or len(lines) != 2:
        raise WorktreeError(f"git rev-parse failed: {heads.first_line()}")
    tip, branch_tip = lines
    if tip != branch_tip:
        # The product switched branches in its worktree: its work still lands on ours.
        moved = await git_retrying(
            repo, path, "update-ref", f"refs/heads/{active.branch}", tip, branch_tip
        )
        if not moved.ok:
            raise WorktreeError(f"git update-ref failed: {moved.first_line()}")
    return tip


async def commit_and_count(
    active: ActiveWorktree, provider: str, ended: str
) -> tuple[str, int, int, int] | None:
    """Commit the run's changes and count them: ``(tip, files, insertions, deletions)``.

    Never raises for a git failure: the worktree is then re-locked as abandoned (a later
    recovery commits it) and ``None`` is returned.
    """
    try:
        tip = await commit_all(active, provider, ended)
        files = insertions = deletions = 0
        if tip != active.base:
            stat = await git_retrying(
                active.repo, active.path, "diff", "--shortstat", active.base, tip
            )
            files, insertions, deletions = _stat(stat.stdout)
    except WorktreeError as exc:
        _log.error("dsh-worktree: collecting %s failed, kept for recovery: %s", active.path, exc)
        await _mark_abandoned(active)
        return None
    return tip, files, insertions, deletions


def kept_for_recovery(active: ActiveWorktree) -> Changes:
    """The changes of a run whose collection failed: the worktree is kept, no commit."""
    return Changes(branch=active.branch, commit=None, base=active.base, worktree=active.path)


async def collect(active: ActiveWorktree, provider: str, ended: str) -> Changes:
    """Commit the run's changes, remove the worktree (unless kept) and say what changed.

    Never raises for a git failure: the worktree is then kept and re-locked as
    abandoned (a later recovery commits it), and the result names it.
    """
    repo = active.repo
    counted = await commit_and_count(active, provider, ended)
    if counted is None:
        return kept_for_recovery(active)
    tip, files, insertions, deletions = counted
    changed = tip != active.base
    async with repository_lock(repo):
        if active.keep:
            await git_retrying(repo, repo.toplevel, "worktree", "unlock", active.path)
        else:
            _write_collected(active, tip)
            await remove_locked(repo, active.path)
            if not changed and active.owns_branch:
                await delete_branch_locked(repo, active.branch, active.base)
    return Changes(
        branch=active.branch,
        commit=tip if changed else None,
        base=active.base,
        files_changed=files,
        insertions=insertions,
        deletions=deletions,
        worktree=active.path if active.keep else None,
    )


async def _mark_abandoned(active: ActiveWorktree) -> None:
    orphan = Owner("-", "-", 0, "-", active.base, active.run_id)
    with contextlib.suppress(WorktreeError):
        async with repository_lock(active.repo):
            await git_retrying(active.repo, active.repo.toplevel, "worktree", "unlock", active.path)
            await git_retrying(
                active.repo,
                active.repo.toplevel,
                "worktree",
                "lock",
                "--reason",
                orphan.reason(),
                active.path,
            )
