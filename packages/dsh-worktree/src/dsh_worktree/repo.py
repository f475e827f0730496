"""The repository a delegation's cwd is in, checked before anything is created.

:func:`open_repository` and :func:`check_new_branch` / :func:`resolve_base` are the bad
input refusals: a cwd that is not inside a git working tree (no repository, a bare
repository, a ``.git`` directory), an unknown base ref, an invalid or existing branch.
Each raises :class:`~dsh_worktree.WorktreeError` with one line naming the problem.

:func:`repository_lock` serialises the operations that change the repository's shared
worktree and branch records (create, remove, delete a branch, recover) among every
dsh-worktree user of one repository, across processes: an exclusive ``flock`` on a file
in the repository's git directory. Git's own lock files stay the authority for everyone
else; a command that finds one of them taken is retried (:func:`git_retrying`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Final

import anyio
from dsh_subprocess import probe_cwd

from dsh_worktree._git import GitResult, git, git_executable
from dsh_worktree.errors import WorktreeError

__all__ = [
    "LOCK_FILE",
    "Repository",
    "check_new_branch",
    "git_retrying",
    "inspect_repository",
    "open_repository",
    "repository_lock",
    "resolve_base",
]

LOCK_FILE: Final = "dsh-worktree.lock"
"""The file in the repository's common git directory that :func:`repository_lock` locks."""

_LOCK_POLL_START: Final = 0.005
_LOCK_POLL_MAX: Final = 0.05
_GIT_LOCK_RETRIES: Final = 8


@dataclass(frozen=True, slots=True)
class Repository:
    """A non-bare repository and where the delegation's cwd is in it.

    Attributes:
        toplevel: The working tree's root that holds the cwd (the main tree, or a linked
            worktree the host itself runs in).
        common_dir: The repository's shared git directory (absolute).
        prefix: The cwd relative to ``toplevel`` (``""`` at the root).
        git: The git executable.
    """

    toplevel: str
    common_dir: str
    prefix: str
    git: str


def _shown(path: str) -> str:
    """``path`` for a one-line message: quoted when it holds a newline or an escape."""
    return path if path.isprintable() else repr(path)


async def open_repository(cwd: str, executable: str | None = None) -> Repository:
    """The repository ``cwd`` is inside, worked on with ``executable`` (default: the
    ``git`` found as every dsh-worktree command finds it).

    Raises:
        WorktreeError: ``cwd`` is not an accessible directory, not inside a git
            repository, inside a bare repository or inside a ``.git`` directory.
    """
    if probe_cwd(cwd) is not None:
        raise WorktreeError(f"the cwd is not an accessible directory: {_shown(cwd)}")
    executable = executable or git_executable()
    result = await git(
        cwd,
        "rev-parse",
        "--is-bare-repository",
        "--is-inside-work-tree",
        "--git-common-dir",
        "--show-prefix",
        executable=executable,
    )
    if not result.ok:
        raise WorktreeError(f"the cwd is not inside a git repository: {_shown(cwd)}")
    lines = result.stdout.split("\n")
    if len(lines) < 4:
        raise WorktreeError(f"git rev-parse gave an unexpected answer in {_shown(cwd)}")
    bare, inside, common, prefix = lines[:4]
    if bare == "true":
        raise WorktreeError(f"the cwd is in a bare repository (no working tree): {_shown(cwd)}")
    if inside != "true":
        raise WorktreeError(f"the cwd is not inside the repository's working tree: {_shown(cwd)}")
    return _located(cwd, common, prefix, executable)


async def inspect_repository(cwd: str, base: str, executable: str) -> tuple[Repository, str]:
    """:func:`open_repository` and :func:`resolve_base` in one git command.

    The same refusals with the same messages (a failure is looked at again by the
    two-step functions, so the message names the first problem found).

    Raises:
        WorktreeError: as :func:`open_repository` and :func:`resolve_base`.
    """
    if probe_cwd(cwd) is None:
        result = await git(
            cwd,
            "rev-parse",
            "--is-bare-repository",
            "--is-inside-work-tree",
            "--git-common-dir",
            "--show-prefix",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{base}^{{commit}}",
            executable=executable,
        )
        lines = result.stdout.split("\n")
        if result.ok and len(lines) >= 5 and lines[:2] == ["false", "true"] and lines[4]:
            return _located(cwd, lines[2], lines[3], executable), lines[4]
    repo = await open_repository(cwd, executable)
    return repo, await resolve_base(repo, base)


def _located(cwd: str, common: str, prefix: str, executable: str) -> Repository:
    real = os.path.realpath(cwd)
    toplevel = real
    for _ in [part for part in prefix.split("/") if part]:
        toplevel = os.path.dirname(toplevel)
    common_dir = os.path.normpath(os.path.join(real, common))
    return Repository(toplevel, common_dir, prefix.rstrip("/"), executable)


async def resolve_base(repo: Repository, base: str) -> str:
    """The commit id ``base`` names.

    Raises:
        WorktreeError: ``base`` names no commit.
    """
    result = await git(
        repo.toplevel,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{base}^{{commit}}",
        executable=repo.git,
    )
    sha = result.stdout.strip()
    if not result.ok or not sha:
        raise WorktreeError(f"the base ref {base!r} does not name a commit in the repository")
    return sha


async def check_new_branch(repo: Repository, branch: str) -> None:
    """Refuse a branch name git does not accept, or one that exists.

    Raises:
        WorktreeError: naming the branch.
    """
    valid = await git(repo.toplevel, "check-ref-format", "--branch", branch, executable=repo.git)
    if not valid.ok or branch.startswith("-"):
        raise WorktreeError(f"{branch!r} is not a valid branch name")
    exists = await git(
        repo.toplevel,
        "show-ref",
        "--verify",
        "--quiet",
        f"refs/heads/{branch}",
        executable=repo.git,
    )
    if exists.ok:
        raise WorktreeError(f"the branch {branch!r} already exists")


def _is_lock_conflict(result: GitResult) -> bool:
    return any(".lock" in line and "exists" in line for line in result.stderr)


async def git_retrying(
    repo: Repository,
    cwd: str,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    stdin: bytes | None = None,
) -> GitResult:
    """:func:`~dsh_worktree._git.git`, retried while one of git's own lock files is taken.

    Another git command (the user's, an editor's) may hold ``index.lock``,
    ``packed-refs.lock`` or a ref lock for a moment; a command that failed for that
    reason is run again after a short, growing pause.
    """
    delay = 0.05
    result = await git(cwd, *args, env=env, executable=repo.git, stdin=stdin)
    for _ in range(_GIT_LOCK_RETRIES):
        if result.ok or not _is_lock_conflict(result):
            return result
        await anyio.sleep(delay)
        delay = min(delay * 2, 1.0)
        result = await git(cwd, *args, env=env, executable=repo.git, stdin=stdin)
    return result


@contextlib.asynccontextmanager
async def repository_lock(repo: Repository) -> AsyncIterator[None]:
    """Hold the repository's dsh-worktree lock (exclusive, across processes).

    Waiting polls a non-blocking ``flock`` with a short growing pause, so a cancelled
    waiter leaves at once and never holds the lock.
    """
    fd = os.open(os.path.join(repo.common_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        delay = _LOCK_POLL_START
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await anyio.sleep(delay)
                delay = min(delay * 2, _LOCK_POLL_MAX)
        yield
    finally:
        os.close(fd)  # releases the lock
