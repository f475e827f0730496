"""``WorktreeProvider``: any provider, each run in its own git worktree.

It wraps a provider through the public contract only: at start it checks the request's
repository, recovers abandoned worktrees, creates a fresh worktree on a new branch and
starts the inner provider with the parent's cwd rewritten to the worktree (the kit's
``cwd:parent-session`` rule is what makes every provider honour it). The run it publishes
settles as the inner run does; before its result is handed out, the inner run is
disposed (so the product's whole process tree has exited) and the worktree collected
(:func:`dsh_worktree.lifecycle.collect`). The result is the inner result with
``changes`` filled in. Disposing without asking for the result collects too: a failed or
cancelled run's work is committed like a completed one's, its commit message saying how
the run ended.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Final, Self

import anyio
from dsh_subagent import (
    ERROR,
    Changes,
    ContinuationHandle,
    ProgressStream,
    ReadyPool,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
)
from pydantic import BaseModel

from dsh_worktree._git import git, git_executable
from dsh_worktree.errors import WorktreeError
from dsh_worktree.lifecycle import (
    ActiveWorktree,
    check_root,
    collect,
    create,
    new_run_id,
    repository_dir,
    write_ready_marker,
)
from dsh_worktree.pool import WarmPool
from dsh_worktree.recovery import announce_recovered, recover
from dsh_worktree.repo import (
    Repository,
    check_new_branch,
    git_retrying,
    inspect_repository,
    open_repository,
    resolve_base,
)
from dsh_worktree.settings import DEFAULT_BRANCH, WorktreeSettings
from dsh_worktree.task import branch_slug, current_task

__all__ = [
    "START_FAILED",
    "Worktree",
    "WorktreeProvider",
    "WorktreeRun",
    "configured_cwd_of",
    "preflight",
]

_log = logging.getLogger("dsh_worktree")

START_FAILED: Final = "start-failed"
"""How a run that failed to start is recorded in its worktree's commit message."""


class Worktree(WorktreeSettings):
    """Run each delegation in a fresh git worktree of the cwd's repository, on a new branch.

    Attributes:
        base: The commit the worktree starts from (any ref git resolves: a branch, a tag,
            a sha). Default: the ``HEAD`` of the repository the delegation's cwd is in.
            Uncommitted changes of the main working tree are not part of the base.
        branch: The new branch's name; ``{id}`` is replaced by the delegation's fresh id.
            The branch must not exist yet.
        root: The directory worktrees are created under (default: :func:`default_root`);
            must be outside the repository's working tree. A relative path resolves
            against the current directory when the settings are made.
        keep: Keep the worktree after its changes were committed (default: remove it;
            the branch always stays when it holds a commit).
        warm: How many worktrees per repository a long-lived provider keeps checked out
            and ready (0 to :data:`MAX_WARM`; default 0: every run checks out its own).
            A run then claims a ready worktree with a few ref writes instead of a
            checkout, and after collection the worktree is reset to the base in the
            background and reused. Only while the provider is entered (``async with``);
            see docs/worktrees.md.
    """

    def isolate(self, provider: SubagentProvider) -> WorktreeProvider:
        """``provider`` with every run in its own worktree (:class:`WorktreeProvider`)."""
        return WorktreeProvider(provider, self)


def configured_cwd_of(provider: SubagentProvider) -> str | None:
    """The provider's configured ``cwd`` override, if its configuration has one."""
    config = getattr(provider, "config", None)
    value = getattr(config, "cwd", None) if isinstance(config, BaseModel) else None
    return value if isinstance(value, str) else None


async def preflight(cwd: str, settings: Worktree) -> None:
    """The start's bad-input checks, creating nothing: for a command line that must refuse
    before it starts anything (git on ``PATH``, a non-bare repository around ``cwd``, the
    base ref, the worktree root, the branch name with a sample id, and the branch itself
    when the pattern has no ``{id}``).

    Raises:
        WorktreeError: the first problem found.
    """
    repo = await open_repository(cwd, git_executable())
    check_root(repo, settings.root_dir())
    await resolve_base(repo, settings.base)
    await check_new_branch(repo, settings.branch_for("0" * 12))


def _branch_for(settings: Worktree, run_id: str, task: str | None) -> str:
    """The run's branch: the default pattern names the task too (``dsh/<task>-<id>``)."""
    slug = branch_slug(task) if task is not None else ""
    if slug and settings.branch == DEFAULT_BRANCH:
        return f"dsh/{slug}-{run_id}"
    return settings.branch_for(run_id)


async def _claimed_for_task(
    active: ActiveWorktree, settings: Worktree, task: str
) -> ActiveWorktree:
    """A warm worktree claimed for ``task``: its marker names the task, and a branch it
    waited on under the plain default name is renamed to name the task too."""
    wanted = _branch_for(settings, active.run_id, task)
    branch = active.branch
    if wanted != branch:
        renamed = await git_retrying(active.repo, active.path, "branch", "-m", branch, wanted)
        if renamed.ok:
            branch = wanted
        else:
            _log.warning(
                "the branch %s keeps its name (naming it for its task failed: %s)",
                branch,
                renamed.first_line(),
            )
    write_ready_marker(active.path, active.run_id, task)
    return replace(active, branch=branch, task=task)


_RUN_DIR = re.compile(r"[0-9a-f]{12}")


def _taken(path: str) -> bool:
    return os.path.lexists(path)


async def _continuing(
    repo: Repository,
    settings: Worktree,
    resume: ContinuationHandle,
    run_id: str,
    task: str | None,
) -> ActiveWorktree:
    """The worktree of a follow-up of an isolated run: the earlier run's branch checked
    out again (its commits are the base, the follow-up's changes are committed onto
    it), in the earlier run's directory when the handle names one of this repository's
    (a product may key its sessions by directory). A branch that no longer exists (the
    earlier run changed nothing) gives a new branch at the configured base.

    Raises:
        WorktreeError: as :func:`create` (the branch is still checked out in a kept
            worktree, say).
    """
    where = resume.workspace
    parent = repository_dir(settings.root_dir(), repo)
    if where is None or os.path.dirname(where) != parent:
        where = None  # not a worktree of this repository under this root: a new directory
    elif not _RUN_DIR.fullmatch(os.path.basename(where)):
        where = None
    if where is not None and _taken(where):
        # Kept (then git refuses the branch checked out there, in one line) or reused by
        # a warm pool: the follow-up works in a directory of its own.
        where = None
    branch = resume.branch
    tip = None
    if branch is not None and not branch.startswith("-"):  # never an option to git
        found = await git(
            repo.toplevel, "rev-parse", "--verify", "--quiet", "--end-of-options",
            f"refs/heads/{branch}^{{commit}}", executable=repo.git,
        )  # fmt: skip
        tip = found.stdout.strip() if found.ok else None
    try:
        announce_recovered(await recover(repo))
    except WorktreeError as exc:
        _log.warning("dsh-worktree: %s", exc.message)
    if branch is not None and tip:
        return await create(repo, settings, tip, branch, run_id, task, path=where, existing=True)
    base = await resolve_base(repo, settings.base)
    fresh = _branch_for(settings, run_id, task)
    await check_new_branch(repo, fresh)
    return await create(repo, settings, base, fresh, run_id, task, path=where)


class WorktreeProvider(SubagentProvider):
    """``inner`` with every run in a fresh git worktree of the cwd's repository.

    Name, capabilities, context inheritance and budget support are the inner
    provider's. Construction starts nothing and runs no git.

    Args:
        inner: The provider whose runs are isolated.
        settings: The isolation settings.

    Raises:
        WorktreeError: ``inner`` configures a ``cwd`` override (its runs would not work
            in the worktree).
    """

    def __init__(self, inner: SubagentProvider, settings: Worktree | None = None) -> None:
        if configured_cwd_of(inner) is not None:
            raise WorktreeError(
                f'provider "{inner.name}" configures a cwd; worktree isolation needs its runs '
                "to work in the delegation's cwd (remove the provider's cwd setting)"
            )
        self._inner = inner
        self._settings = settings if settings is not None else Worktree()
        self._pool: WarmPool | None = None
        self._ready_watchers: list[Callable[[list[str]], None]] = []

    @property
    def inner(self) -> SubagentProvider:
        """The wrapped provider."""
        return self._inner

    @property
    def settings(self) -> Worktree:
        """The isolation settings."""
        return self._settings

    @property
    def name(self) -> str:
        """The inner provider's name."""
        return self._inner.name

    @property
    def capabilities(self) -> SubagentCapabilities:
        """The inner provider's capabilities."""
        return self._inner.capabilities

    @property
    def inherits_parent_context(self) -> bool:
        """The inner provider's answer."""
        return self._inner.inherits_parent_context

    @property
    def honours_budgets(self) -> bool:
        """The inner provider's answer."""
        return self._inner.honours_budgets

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Check, recover, create the worktree, then start the inner provider in it.

        Raises:
            WorktreeError: bad input (no cwd, not in a non-bare repository, unknown
                base, invalid or existing branch, git missing): nothing was created and
                no product was started.
            SubagentError: whatever the inner ``start()`` raises (the worktree is then
                collected: anything written is kept on its branch, an untouched branch is
                deleted).
        """
        if request.cancel.aborted:
            return await self._inner.start(request)  # refuses without starting anything
        cwd = request.parent.cwd
        if cwd is None:
            raise WorktreeError(
                "the delegation has no working directory (the cwd names the repository)"
            )
        settings = self._settings
        pool = self._pool if self._pool is not None and self._pool.active else None
        run_id = new_run_id()
        task = current_task()
        branch = _branch_for(settings, run_id, task)
        active: ActiveWorktree | None = None
        resume = request.resume
        if resume is not None and resume.workspace is not None:
            # A follow-up of an isolated run: on its branch, in its directory (no pool).
            pool = None
            repo = await open_repository(cwd, git_executable())
            active = await _continuing(repo, settings, resume, run_id, task)
        elif pool is not None:
            if branch.startswith("-"):
                raise WorktreeError(f"{branch!r} is not a valid branch name")
            repo, base, active = await pool.claim_at(cwd, branch, run_id)
            if active is not None:  # a directory the base does not track, as at create
                os.makedirs(active.child_cwd(), exist_ok=True)
        else:
            repo = await open_repository(cwd, git_executable())
            base = await resolve_base(repo, settings.base)
        collector: Callable[[ActiveWorktree, str, str], Awaitable[Changes]] = (
            pool.release if active is not None and pool is not None else collect
        )
        if active is None:
            await check_new_branch(repo, branch)
            try:
                announce_recovered(await recover(repo))
            except WorktreeError as exc:  # an old worktree must not block a new run
                _log.warning("dsh-worktree: %s", exc.message)
            active = await create(repo, settings, base, branch, run_id, task)
            if pool is not None:
                collector = pool.adopt(active)  # the pool grows by the worktrees runs need
        elif task is not None and pool is not None:
            active = await _claimed_for_task(active, settings, task)
        isolated = request.model_copy(
            update={"parent": request.parent.model_copy(update={"cwd": active.child_cwd()})}
        )
        try:
            inner = await self._inner.start(isolated)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await collector(active, self.name, START_FAILED)
            raise
        return WorktreeRun(inner, active, self.name, collector)

    # -- the warm pool -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Open the warm pool (``settings.warm > 0``); without one, nothing happens.

        Entering again after :meth:`dispose` opens a new, empty pool.
        """
        if self._settings.warm > 0:
            if self._pool is not None and self._pool.active:
                raise RuntimeError("this WorktreeProvider's warm pool is open already")
            self._pool = WarmPool(self._settings)
            await self._pool.open()
            for watcher in self._ready_watchers:  # entered again: the same ready pools
                self._pool.watch_idle(watcher)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """:meth:`dispose`."""
        await self.dispose()

    async def dispose(self) -> None:
        """Close the warm pool: background work stops and every worktree it holds is
        removed (a worktree a live run still works in is removed by that run's
        collection). Call it from the task that entered the provider. Idempotent."""
        if self._pool is not None:
            await self._pool.close()

    async def prewarm(self, cwd: str) -> None:
        """Fill the warm pool for the repository ``cwd`` is in, at the configured base,
        and wait until it holds ``settings.warm`` ready worktrees (or filling stopped).

        Raises:
            RuntimeError: the provider has no open warm pool (``warm`` is 0, or it was
                not entered).
            WorktreeError: ``cwd`` or the base is refused, as at start.
        """
        pool = self._pool
        if pool is None or not pool.active:
            raise RuntimeError("prewarm() needs a WorktreeProvider entered with warm > 0")
        repo, base = await inspect_repository(cwd, self._settings.base, git_executable())
        pool.prepare(repo, base, cwd)
        await pool.wait_settled()

    async def wait_settled(self) -> None:
        """Wait until the warm pool's background work (filling, recycling) is done."""
        if self._pool is not None:
            await self._pool.wait_settled()

    def hold_ready(self, pool: ReadyPool, progress_commands: bool) -> bool:
        """Keep the inner provider's ready products (``pool``, the service's) in the warm
        pool's idle worktrees, one each, the worktree handed out next first; returns
        whether there is an open warm pool (without one every delegation starts cold)."""
        warm = self._pool
        if warm is None or not warm.active:
            return False
        watcher = functools.partial(_hold_in, pool, progress_commands)
        self._ready_watchers.append(watcher)
        warm.watch_idle(watcher)
        return True

    def warm_count(self, repo: Repository) -> int:
        """How many ready worktrees the warm pool holds for the repository."""
        return self._pool.idle_count(repo) if self._pool is not None else 0


def _hold_in(pool: ReadyPool, progress_commands: bool, cwds: list[str]) -> None:
    pool.hold([(cwd, progress_commands) for cwd in cwds])


class WorktreeRun:
    """A published isolated run: the inner run, then its worktree collected.

    ``result()`` waits for the inner run to settle, disposes it (whole-tree exit),
    collects the worktree once and returns the inner result with ``changes``.
    ``dispose()`` disposes the inner run and collects too. Both are memoised; collection
    is shielded from cancellation.
    """

    def __init__(
        self,
        inner: SubagentRun,
        active: ActiveWorktree,
        provider: str,
        collector: Callable[[ActiveWorktree, str, str], Awaitable[Changes]] | None = None,
    ) -> None:
        self._inner = inner
        self._active = active
        self._provider = provider
        self._collector = collector
        stream = getattr(inner, "progress", None)
        self.progress: ProgressStream = (
            stream if isinstance(stream, ProgressStream) else ProgressStream()
        )
        """The inner run's progress."""
        self._done: anyio.Event | None = None
        self._result: SubagentResult | None = None
        self._error: Exception | None = None

    @property
    def id(self) -> str:
        """The inner run's id."""
        return self._inner.id

    @property
    def local_agent(self) -> object | None:
        """The inner run's local agent."""
        return self._inner.local_agent

    @property
    def worktree(self) -> ActiveWorktree:
        """The worktree this run works in."""
        return self._active

    async def result(self) -> SubagentResult:
        """The inner result with ``changes``, once the worktree has been collected."""
        with contextlib.suppress(Exception):  # _finish records it and it is raised below
            await self._inner.result()
        await self._finish()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def dispose(self) -> None:
        """Dispose the inner run, then collect the worktree (memoised)."""
        try:
            await self._inner.dispose()
        finally:
            await self._finish()

    async def _finish(self) -> None:
        if self._done is not None:
            await self._done.wait()
            return
        self._done = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):
                await self._settle_and_collect()
        finally:
            self._done.set()

    async def _settle_and_collect(self) -> None:
        try:
            await self._inner.dispose()
        except Exception as exc:
            # The error reaches the holder through its own dispose(); the work is kept.
            _log.warning("dsh-worktree: disposing the run failed before collection: %r", exc)
        result: SubagentResult | None = None
        try:
            result = await self._inner.result()
        except Exception as exc:
            self._error = exc
        ended = result.stop_reason if result is not None else ERROR
        collector = self._collector if self._collector is not None else collect
        changes: Changes = await collector(self._active, self._provider, ended)
        if result is not None:
            update: dict[str, object] = {"changes": changes}
            if result.continuation is not None:
                # A follow-up continues this run's work: in its directory, on its branch.
                active = self._active
                kept = changes.commit is not None or not active.owns_branch
                update["continuation"] = result.continuation.model_copy(
                    update={"workspace": active.path, "branch": active.branch if kept else None}
                )
            self._result = result.model_copy(update=update)
