"""A warm pool: worktrees checked out ahead of time, claimed by ref writes, reused.

Checking out a large repository is the whole cost of isolation (10 000 files: about a
second), so a long-lived :class:`~dsh_worktree.WorktreeProvider` with ``warm=N`` keeps
up to N worktrees per repository checked out at the base, locked by this process like
any other (see :mod:`dsh_worktree.owner`). Their life:

- **growth**: a run that finds no ready worktree (and none being reset) has one checked
  out as without a pool; after collection it joins the pool while the pool holds fewer
  than N. ``prewarm`` fills the pool ahead instead (in the background: recover abandoned
  worktrees of the repository, then ``git worktree add`` until it holds N).
- **claim** (on the run's path): with the default branch pattern (``{id}`` in it) an
  idle worktree already sits on a branch of its own at the base, named for the id of the
  delegation that will claim it, so a claim touches nothing: when the repository's
  ``HEAD`` can be read from git's files (:mod:`dsh_worktree._refs`) and is the pool's
  base, no git command runs at all (else one ``git rev-parse`` checks it). With a
  pattern without ``{id}`` the idle worktree is detached and the claim runs ``git switch
  --create BRANCH``, which creates the branch at the base without touching a file. A
  different base falls back to a fresh checkout (and the pool's old worktrees go).
- **collect** (on the run's path): an idle worktree's directory tree is watched
  (:mod:`dsh_worktree._tree_watch`, Linux inotify); when nothing under it changed and the
  run left ``HEAD`` on its branch at the base, one ref transaction detaches ``HEAD`` and
  deletes the branch. Otherwise one ``git status`` decides as without the watch:
  nothing changed → the same transaction; anything changed → the same commit as
  without a pool, then ``HEAD`` is detached (the branch is checked out nowhere once the
  result is handed out).
- **recycle** (background): ``git reset --hard`` and ``git clean -ffdx`` back to exactly
  the base's tree (ignored files and nested repositories go too), then the next branch
  is created and the watch armed again; a worktree whose git
  administrative directory holds anything a fresh one does not (a merge, rebase or
  bisect in progress, per-worktree refs or configuration) is removed instead, as is
  one whose reset fails, or any while the pool is full or closing.

Crash safety is the provider's: an idle worktree holds nothing (recovery finds nothing to
commit, removes it and deletes its branch), a claimed one is on its branch with its
ready marker naming the delegation (recovery commits it).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import anyio
from anyio.abc import TaskGroup
from dsh_subagent import Changes
from dsh_subprocess import probe_cwd

from dsh_worktree._git import GitResult, git_executable
from dsh_worktree._refs import head_commit, worktree_git_dir
from dsh_worktree._tree_watch import TreeWatch
from dsh_worktree.errors import WorktreeError
from dsh_worktree.lifecycle import (
    ActiveWorktree,
    collect,
    commit_and_count,
    create,
    kept_for_recovery,
    new_run_id,
    remove_locked,
    write_ready_marker,
)
from dsh_worktree.pooled import (
    detach,
    left_as_claimed,
    reset_to_base,
    status_unchanged,
    switch_to_new_branch,
)
from dsh_worktree.recovery import announce_recovered, recover
from dsh_worktree.repo import Repository, git_retrying, inspect_repository, repository_lock
from dsh_worktree.settings import WorktreeSettings

__all__ = ["WarmPool"]

_log = logging.getLogger("dsh_worktree")


@dataclass(slots=True)
class _Pool:
    """One repository's warm worktrees."""

    repo: Repository
    base: str
    idle: list[ActiveWorktree] = field(default_factory=list)
    size: int = 0
    """Worktrees this pool owns: idle, claimed, being created or recycled."""
    filling: bool = False
    recycling: int = 0
    waiting: int = 0
    """Claims waiting for a worktree being recycled: the next idle ones are theirs."""
    """Worktrees being reset for reuse: a claim waits for one rather than check out."""
    handed: dict[str, ActiveWorktree] = field(default_factory=dict)
    """Worktrees handed to background work (reset or removal), by path: removed at close
    if that work never ran."""
    returned: anyio.Event = field(default_factory=anyio.Event)
    watches: dict[str, TreeWatch] = field(default_factory=dict)
    """The watch on each idle worktree's tree, by path (armed once it was clean)."""

    def unwatch(self, path: str) -> None:
        watch = self.watches.pop(path, None)
        if watch is not None:
            watch.close()


class WarmPool:
    """The warm worktrees of one provider, per repository (see the module docstring).

    Background work runs in a task group opened by :meth:`open` and ended by
    :meth:`close`, which removes every worktree the pool still holds.
    """

    def __init__(self, settings: WorktreeSettings) -> None:
        self._settings = settings
        self._pools: dict[str, _Pool] = {}
        # A cwd -> its repository as seen from there, and its working tree's git directory.
        self._cwds: dict[str, tuple[Repository, str | None]] = {}
        self._group: TaskGroup | None = None
        self._closing = False
        self._pending = 0
        self._settled = anyio.Event()
        self._settled.set()
        self._watchers: list[Callable[[list[str]], None]] = []

    def watch_idle(self, watcher: Callable[[list[str]], None]) -> None:
        """Call ``watcher`` now and whenever the idle worktrees change, with the cwds runs
        claiming them work in, the next claimed first (a ready product is prepared there)."""
        self._watchers.append(watcher)
        watcher(self.idle_cwds())

    def idle_cwds(self) -> list[str]:
        """Where runs claiming the idle worktrees work, the next claimed first (a claim
        takes the last idle worktree)."""
        # A worktree a waiting claim takes the moment it is idle gets no product: it could
        # not be ready in time and would be ended unused.
        return [
            slot.child_cwd()
            for pool in self._pools.values()
            for slot in list(reversed(pool.idle))[pool.waiting :]
        ]

    def _announce(self) -> None:
        # A claim is not announced: the ready product made for that worktree is the
        # claiming run's, and the ready pool drops the key when the run claims it.
        cwds = self.idle_cwds()
        for watcher in self._watchers:
            try:
                watcher(cwds)
            except Exception as exc:  # a watcher never breaks the pool
                _log.error("dsh-worktree: an idle-worktree watcher failed: %r", exc)

    @property
    def active(self) -> bool:
        """Open and not closing: runs claim from it."""
        return self._group is not None and not self._closing

    async def open(self) -> None:
        """Start the pool's task group (background fill and recycle)."""
        if self._group is not None or self._closing:
            raise RuntimeError("a warm worktree pool can be opened once")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group

    async def close(self) -> None:
        """Stop background work and remove every worktree the pool holds (shielded).

        A worktree still claimed by a live run is collected and removed by that run.
        """
        self._closing = True
        group, self._group = self._group, None
        if group is not None:  # its scope must be left where it was entered: not shielded
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            for pool in self._pools.values():
                left = [*pool.idle, *pool.handed.values()]
                pool.idle, pool.handed, pool.size = [], {}, 0
                self._announce()
                for slot in left:
                    pool.unwatch(slot.path)
                    await self._remove(pool.repo, slot, branch=slot.branch or None)
            self._pending = 0  # a task cancelled before it began never counted down
            self._settled.set()

    async def wait_settled(self) -> None:
        """Wait until no fill or recycle is under way."""
        while self._pending:
            await self._settled.wait()

    def idle_count(self, repo: Repository) -> int:
        """How many ready worktrees the pool holds for ``repo``."""
        pool = self._pools.get(repo.common_dir)
        return len(pool.idle) if pool is not None else 0

    def _soon(self, work: Callable[[], Awaitable[None]]) -> None:
        group = self._group
        if group is None or self._closing:
            return

        async def tracked() -> None:
            try:
                await work()
            finally:
                self._pending -= 1
                if not self._pending:
                    self._settled.set()

        if not self._pending:
            self._settled = anyio.Event()
        self._pending += 1
        group.start_soon(tracked)

    def _pool(self, repo: Repository, base: str) -> _Pool:
        pool = self._pools.get(repo.common_dir)
        if pool is None:
            pool = self._pools[repo.common_dir] = _Pool(repo, base)
        elif pool.base != base:
            # The base moved (a new commit on HEAD): old worktrees are replaced.
            pool.base = base
            stale, pool.idle = pool.idle, []
            self._announce()
            pool.size -= len(stale)
            for slot in stale:
                pool.unwatch(slot.path)
                pool.handed[slot.path] = slot
                self._soon(functools.partial(self._remove_handed, pool, slot))
        return pool

    def _remember(self, cwd: str, repo: Repository) -> None:
        self._cwds[cwd] = (repo, worktree_git_dir(repo.toplevel))

    @property
    def _branched(self) -> bool:
        """Whether idle worktrees wait on a branch of their own (the pattern has ``{id}``)."""
        return self._settings.branch_for("0") != self._settings.branch_for("1")

    def prepare(self, repo: Repository, base: str, cwd: str | None = None) -> None:
        """Fill the pool for ``repo`` at ``base`` in the background (for runs from ``cwd``)."""
        if cwd is not None:
            self._remember(cwd, repo)
        pool = self._pool(repo, base)
        if pool.size < self._settings.warm and not pool.filling and self.active:
            pool.filling = True
            self._soon(functools.partial(self._fill, pool))

    def adopt(
        self, active: ActiveWorktree
    ) -> Callable[[ActiveWorktree, str, str], Awaitable[Changes]]:
        """How to collect a worktree the provider had to create for a run: through the
        pool (it joins it) while the pool has room, else as without a pool."""
        pool = self._pools.get(active.repo.common_dir)
        if pool is None or pool.base != active.base or pool.size >= self._settings.warm:
            return collect
        pool.size += 1
        return self.release

    def _claim_by_files(self, cwd: str) -> tuple[Repository, str, ActiveWorktree] | None:
        """A branched idle worktree, claimed without running git: the cwd's repository is
        known, its ``HEAD`` read from git's files is the pool's base (``base="HEAD"``)."""
        known = self._cwds.get(cwd)
        if known is None or self._settings.base != "HEAD" or not self._branched:
            return None
        repo, git_dir = known
        pool = self._pools.get(repo.common_dir)
        if pool is None or not pool.idle or git_dir is None or probe_cwd(cwd) is not None:
            return None
        if head_commit(git_dir, repo.common_dir) != pool.base or not pool.idle[-1].branch:
            return None
        slot = pool.idle.pop()
        return repo, pool.base, self._claimed_branch(repo, pool.base, slot)

    def _claimed_branch(self, repo: Repository, base: str, slot: ActiveWorktree) -> ActiveWorktree:
        # The run takes the id and branch the worktree waited with.
        return ActiveWorktree(repo, slot.path, slot.branch, base, slot.run_id, self._settings.keep)

    async def claim_at(
        self, cwd: str, branch: str, run_id: str
    ) -> tuple[Repository, str, ActiveWorktree | None]:
        """The repository ``cwd`` is in, the base commit, and a claimed worktree (``None``:
        none is ready, the caller creates one with ``branch`` and ``run_id``).

        A branched idle worktree is claimed as it is (its own id and branch; no git
        command when ``HEAD`` reads as the base). Otherwise, when an earlier run from
        ``cwd`` found this pool, the branch is created in one of its idle worktrees
        *while* the repository and base are looked up (two git commands at once instead
        of one after the other); a claim that turns out wrong (another repository, a
        moved base) is undone.

        Raises:
            WorktreeError: as :func:`~dsh_worktree.repo.inspect_repository`, or the branch
                exists or is not a valid name (the worktree goes back to the pool).
        """
        fast = self._claim_by_files(cwd)
        if fast is not None:
            return fast
        executable = git_executable()
        known = self._cwds.get(cwd)
        key = known[0].common_dir if known is not None else None
        pool = self._pools.get(key) if key is not None else None
        if pool is None or not pool.idle or self._branched:
            repo, base = await inspect_repository(cwd, self._settings.base, executable)
            self._remember(cwd, repo)
            return repo, base, await self.claim(repo, base, branch, run_id)
        slot = pool.idle.pop()
        found: list[tuple[Repository, str]] = []
        refused: list[WorktreeError] = []
        switched: list[GitResult] = []

        async def look() -> None:
            try:
                found.append(await inspect_repository(cwd, self._settings.base, executable))
            except WorktreeError as exc:
                refused.append(exc)

        async def switch() -> None:
            switched.append(await switch_to_new_branch(pool.repo, slot, branch))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(look)
                group.start_soon(switch)
        except BaseException:
            await self._drop(pool, slot, branch=branch)
            raise
        (done,) = switched
        right = bool(found) and found[0][0].common_dir == key and found[0][1] == slot.base
        if not right and done.ok:  # undo: the branch goes, the worktree is idle again
            undo = ActiveWorktree(pool.repo, slot.path, branch, slot.base, run_id, False)
            if await detach(undo, delete_branch=True):
                pool.idle.append(slot)
            else:
                await self._drop(pool, slot, branch=branch)
        if refused:
            if not done.ok:
                pool.idle.append(slot)
            raise refused[0]
        repo, base = found[0]
        self._remember(cwd, repo)
        if not right:
            if not done.ok:
                pool.idle.append(slot)
            return repo, base, await self.claim(repo, base, branch, run_id)
        claimed = await self._claimed(pool, slot, done, branch, run_id)
        if claimed is None:
            return repo, base, None
        return (
            repo,
            base,
            ActiveWorktree(repo, slot.path, branch, base, run_id, self._settings.keep),
        )

    async def claim(
        self, repo: Repository, base: str, branch: str, run_id: str
    ) -> ActiveWorktree | None:
        """An idle worktree at ``base`` switched to the new ``branch``, or ``None`` (none
        is ready: the caller creates one).

        Raises:
            WorktreeError: the branch exists or is not a valid name (the worktree goes
                back to the pool untouched).
        """
        pool = self._pool(repo, base)
        pool.waiting += 1
        try:
            while not pool.idle and pool.recycling and self.active:
                await pool.returned.wait()  # a reset (~0.1 s) beats a checkout (seconds)
        finally:
            pool.waiting -= 1
        if not pool.idle:
            return None
        slot = pool.idle.pop()
        if slot.branch:
            return self._claimed_branch(repo, base, slot)
        try:
            switched = await switch_to_new_branch(repo, slot, branch)
        except BaseException:
            await self._drop(pool, slot, branch=branch)
            raise
        if await self._claimed(pool, slot, switched, branch, run_id) is None:
            return None
        return ActiveWorktree(repo, slot.path, branch, base, run_id, self._settings.keep)

    async def _claimed(
        self, pool: _Pool, slot: ActiveWorktree, switched: GitResult, branch: str, run_id: str
    ) -> ActiveWorktree | None:
        """Finish a claim after ``git switch``: the slot, or ``None`` after dropping it.

        Raises:
            WorktreeError: the branch exists or is not a valid name (the slot is idle again).
        """
        if not switched.ok:
            line = switched.first_line()
            if "already exists" in line:
                pool.idle.append(slot)
                raise WorktreeError(f"the branch {branch!r} already exists")
            if "not a valid branch name" in line:
                pool.idle.append(slot)
                raise WorktreeError(f"{branch!r} is not a valid branch name")
            _log.warning("dsh-worktree: claiming %s failed: %s", slot.path, line)
            await self._drop(pool, slot, branch=branch)
            return None
        try:
            write_ready_marker(slot.path, run_id)
        except (WorktreeError, OSError) as exc:
            _log.warning("dsh-worktree: claiming %s failed: %s", slot.path, exc)
            await self._drop(pool, slot, branch=branch)
            return None
        return slot

    async def release(self, active: ActiveWorktree, provider: str, ended: str) -> Changes:
        """Collect a claimed worktree's run (as :func:`~dsh_worktree.lifecycle.collect`),
        then give the worktree back to the pool in the background."""
        pool = self._pools[active.repo.common_dir]
        watch = pool.watches.pop(active.path, None)
        try:
            untouched = watch is not None and not watch.changed() and left_as_claimed(active)
        finally:
            if watch is not None:
                self._close_later(watch)
        if active.keep or not self.active:
            pool.size -= 1
            return await collect(active, provider, ended)
        if (untouched or await status_unchanged(active)) and await detach(
            active, delete_branch=True
        ):
            await self._give_back(pool, active)
            return Changes(branch=active.branch, commit=None, base=active.base)
        counted = await commit_and_count(active, provider, ended)
        if counted is None:
            pool.size -= 1  # kept for recovery
            return kept_for_recovery(active)
        tip, files, insertions, deletions = counted
        changed = tip != active.base
        if await detach(active, delete_branch=not changed):
            await self._give_back(pool, active)
        else:
            await self._drop(pool, active, branch=None if changed else active.branch)
        return Changes(
            branch=active.branch,
            commit=tip if changed else None,
            base=active.base,
            files_changed=files,
            insertions=insertions,
            deletions=deletions,
        )

    def _close_later(self, watch: TreeWatch) -> None:
        """Close a watch off the run's path: the kernel tears an inotify instance down in
        a grace period that took 5-18 ms here while the machine was busy."""
        if not self.active:  # nothing runs in the background any more
            watch.close()
        else:
            self._soon(functools.partial(anyio.to_thread.run_sync, watch.close))

    async def _give_back(self, pool: _Pool, active: ActiveWorktree) -> None:
        """Recycle a collected worktree in the background (remove it when closing)."""
        if not self.active:
            await self._drop(pool, active)
            return
        pool.recycling += 1
        # Handed work holds only what the pool owns: the run's branch is the run's.
        pool.handed[active.path] = replace(active, branch="")
        self._soon(functools.partial(self._recycle, pool, active))

    async def _remove_handed(self, pool: _Pool, slot: ActiveWorktree) -> None:
        try:
            await self._remove(pool.repo, slot, branch=slot.branch or None)
        finally:
            pool.handed.pop(slot.path, None)

    async def _recycle(self, pool: _Pool, active: ActiveWorktree) -> None:
        detached = replace(active, branch="", keep=False)
        slot: ActiveWorktree | None = detached
        try:
            try:
                fresh = await reset_to_base(detached)
                if fresh and self._branched:
                    slot = await self._branch_anew(pool, detached)
            except BaseException:
                await self._drop(pool, pool.handed.get(active.path, detached), idle=True)
                raise
            room = len(pool.idle) < self._settings.warm
            if slot is None:
                await self._drop(pool, pool.handed.get(active.path, detached), idle=True)
            elif fresh and room and not self._closing and pool.base == slot.base:
                pool.handed.pop(active.path, None)
                await self._idle(pool, slot)
            else:
                await self._drop(pool, slot, idle=True)
        finally:
            pool.handed.pop(active.path, None)
            pool.recycling -= 1
            returned, pool.returned = pool.returned, anyio.Event()
            returned.set()

    async def _branch_anew(self, pool: _Pool, slot: ActiveWorktree) -> ActiveWorktree | None:
        """The reset worktree on a new branch of its own at the base, for the next run
        (its id in the ready marker), or ``None`` when git refused."""
        run_id = new_run_id()
        branch = self._settings.branch_for(run_id)
        branched = replace(slot, branch=branch, run_id=run_id)
        pool.handed[slot.path] = branched  # so a close meanwhile deletes the branch too
        try:
            write_ready_marker(slot.path, run_id)
        except (WorktreeError, OSError) as exc:
            _log.warning("dsh-worktree: preparing %s failed: %s", slot.path, exc)
            return None
        done = await git_retrying(slot.repo, slot.path, "switch", "--quiet", "--create", branch)
        if not done.ok:
            _log.warning("dsh-worktree: preparing %s failed: %s", slot.path, done.first_line())
            return None
        return branched

    async def _idle(self, pool: _Pool, slot: ActiveWorktree) -> None:
        """Make ``slot`` idle, then arm the watch on its tree (in a thread: a walk of every
        directory). Without a watch (not Linux, a limit reached) its collection runs ``git
        status``; so it has none when a run claimed it while the walk went on: the watch
        would have missed what that run wrote before it was complete."""
        pool.idle.append(slot)
        self._announce()
        with anyio.CancelScope(shield=True):  # an armed watch is never dropped unclosed
            watch = await anyio.to_thread.run_sync(TreeWatch.arm, slot.path)
        pool.unwatch(slot.path)
        if watch is None:
            return
        if any(idle is slot for idle in pool.idle):
            pool.watches[slot.path] = watch
        else:
            watch.close()

    async def _fill(self, pool: _Pool) -> None:
        try:
            try:
                announce_recovered(await recover(pool.repo))
            except WorktreeError as exc:  # an old worktree must not block the pool
                _log.warning("dsh-worktree: %s", exc.message)
            settings = self._settings.model_copy(update={"keep": False})
            while not self._closing and pool.size < self._settings.warm:
                pool.size += 1
                base = pool.base
                run_id = new_run_id()
                branch = settings.branch_for(run_id) if self._branched else None
                try:
                    slot = await create(pool.repo, settings, base, branch, run_id)
                except WorktreeError as exc:
                    pool.size -= 1
                    _log.warning("dsh-worktree: preparing a warm worktree failed: %s", exc)
                    return
                except BaseException:
                    pool.size -= 1
                    raise
                if self._closing or pool.base != base:
                    await self._drop(pool, slot, idle=True)
                else:
                    await self._idle(pool, slot)
        finally:
            pool.filling = False

    async def _drop(
        self, pool: _Pool, slot: ActiveWorktree, *, branch: str | None = None, idle: bool = False
    ) -> None:
        """Remove a worktree of the pool (and ``branch``, when still at the base; an
        ``idle`` slot's own branch)."""
        pool.size -= 1
        pool.unwatch(slot.path)
        await self._remove(pool.repo, slot, branch=(slot.branch or None) if idle else branch)

    async def _remove(
        self, repo: Repository, slot: ActiveWorktree, *, branch: str | None = None
    ) -> None:
        with contextlib.suppress(WorktreeError), anyio.CancelScope(shield=True):
            async with repository_lock(repo):
                await remove_locked(repo, slot.path)
                if branch:
                    await git_retrying(
                        repo,
                        repo.toplevel,
                        "update-ref",
                        "-d",
                        f"refs/heads/{branch}",
                        slot.base,
                    )
