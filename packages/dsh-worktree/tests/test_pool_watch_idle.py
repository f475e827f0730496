"""``WarmPool.watch_idle``: the idle worktrees a ready-product pool prepares products in
(docs/harness.md, "Ready products"), against real git."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from dsh_subagent import ReadyPool, delegate
from dsh_worktree import Worktree
from worktree_doubles import EditingProvider

pytestmark = pytest.mark.anyio


async def test_the_watcher_hears_the_idle_worktrees_next_claimed_first(
    repo: Path, tmp_path: Path
) -> None:
    heard: list[list[str]] = []
    root = tmp_path / "wt"
    inner = EditingProvider(None)
    async with Worktree(warm=2, root=str(root)).isolate(inner) as provider:
        await provider.prewarm(str(repo))
        pool = provider._pool
        assert pool is not None
        pool.watch_idle(heard.append)
        idle = heard[-1]  # told at once
        assert len(idle) == 2
        assert all(Path(cwd).parent.parent == root for cwd in idle)
        result = await delegate(provider, "edit", cwd=repo)
        assert result.changes is not None
        assert inner.cwds[0] == idle[0]  # the first one heard is the one claimed
        await provider.wait_settled()
        assert sorted(heard[-1]) == sorted(idle)  # recycled: idle again, heard again
        assert heard[-1][0] == idle[0]  # and handed out next (a claim takes the last idle)
    assert heard[-1] == []  # closing: no idle worktree is left


class HeldKeys:
    """Stands for the service's per-key ready pool: records what it is told to hold."""

    def __init__(self) -> None:
        self.held: list[list[tuple[str, bool]]] = []

    def hold(self, keys: list[tuple[str, bool]]) -> None:
        self.held.append(list(keys))


async def test_hold_ready_needs_an_open_pool_and_outlives_a_reentry(
    repo: Path, tmp_path: Path
) -> None:
    ready = HeldKeys()
    provider = Worktree(warm=1, root=str(tmp_path / "wt")).isolate(EditingProvider(None))
    assert not provider.hold_ready(cast("ReadyPool", ready), False)  # not entered: cold
    async with provider:
        await provider.prewarm(str(repo))
        assert provider.hold_ready(cast("ReadyPool", ready), True)
        ((first,),) = ready.held[-1:]
        assert first[1] is True  # the delegations' progress_commands
    assert ready.held[-1] == []
    async with provider:  # entered again: a new warm pool tells the same ready pool
        await provider.prewarm(str(repo))
        ((again,),) = ready.held[-1:]
        assert again != first  # a new worktree
