"""``WarmPool.watch_idle``: the idle worktrees a ready-product pool prepares products in
(docs/harness.md, "Ready products"), against real git."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh_subagent import delegate
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
