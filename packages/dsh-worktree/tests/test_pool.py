"""The warm worktree pool (``Worktree(warm=N)``) against real git: claim, collect,
recycle, dispose, parallel claims, a moved base, refusals and settings."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    SubagentResult,
    SubagentService,
    delegate,
)
from dsh_worktree import MAX_WARM, Worktree, WorktreeError, WorktreeProvider, open_repository
from dsh_worktree._git import git_executable
from dsh_worktree.testing import git_out
from pydantic import ValidationError
from worktree_doubles import Edit, EditingProvider

pytestmark = pytest.mark.anyio


def _worktrees(repo: Path) -> list[str]:
    return [
        line.removeprefix("worktree ")
        for line in git_out(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def _checked_out_branches(repo: Path) -> list[str]:
    return [
        line.removeprefix("branch refs/heads/")
        for line in git_out(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("branch ")
    ]


def _tree_of(cwd: Path) -> dict[str, str]:
    """Every file under ``cwd`` (ignored ones too, not ``.git``) with its content."""
    files: dict[str, str] = {}
    for folder, dirs, names in os.walk(cwd):
        dirs[:] = [name for name in dirs if name != ".git"]
        for name in names:
            path = Path(folder) / name
            if path.name == ".git" and path.parent == cwd:
                continue
            files[str(path.relative_to(cwd))] = path.read_text(encoding="utf-8")
    return files


def _messy_edit(cwd: Path) -> None:
    (cwd / "shared.txt").write_text("changed by the run\n", encoding="utf-8")
    (cwd / "gone.txt").unlink()
    (cwd / "added.txt").write_text("new\n", encoding="utf-8")
    (cwd / "build.log").write_text("ignored output\n", encoding="utf-8")
    (cwd / "cache").mkdir()
    (cwd / "cache" / "x.log").write_text("ignored in a new directory\n", encoding="utf-8")
    nested = cwd / "deps.log" / "nested"  # an ignored directory holding a repository
    nested.mkdir(parents=True)
    git_out(nested, "init", "--quiet")
    (nested / "inside.txt").write_text("a nested repository\n", encoding="utf-8")
    git_out(cwd, "add", "shared.txt")  # a staged change too


class Observer:
    """An edit that records what the run saw in its cwd."""

    def __init__(self) -> None:
        self.tree: dict[str, str] = {}
        self.status = ""
        self.head = ""
        self.commit = ""

    def __call__(self, cwd: Path) -> None:
        self.tree = _tree_of(cwd)
        self.status = git_out(cwd, "status", "--porcelain", "--ignored", "--untracked-files=all")
        self.head = git_out(cwd, "symbolic-ref", "HEAD")
        self.commit = git_out(cwd, "rev-parse", "HEAD")


def _warm(edit: Edit | None, tmp_path: Path, warm: int = 1, **kw: object) -> WorktreeProvider:
    settings = Worktree.model_validate({"warm": warm, "root": str(tmp_path / "wt"), **kw})
    return settings.isolate(EditingProvider(edit))


async def _run(provider: WorktreeProvider, repo: Path) -> SubagentResult:
    return await delegate(provider, "edit", cwd=repo)


async def test_a_recycled_worktree_is_indistinguishable_from_a_fresh_one(
    repo: Path, tmp_path: Path
) -> None:
    base = git_out(repo, "rev-parse", "HEAD")
    fresh = Observer()
    cold = await delegate(
        EditingProvider(fresh), "look", cwd=repo, isolation=Worktree(root=str(tmp_path / "c"))
    )
    assert cold.changes is not None
    assert cold.changes.commit is None

    first_provider = EditingProvider(_messy_edit)
    seen = Observer()
    async with Worktree(warm=1, root=str(tmp_path / "wt")).isolate(first_provider) as provider:
        await provider.prewarm(str(repo))
        first = await _run(provider, repo)
        await provider.wait_settled()
        provider.inner._edit = seen  # type: ignore[attr-defined]  # the second run looks
        second = await _run(provider, repo)
        await provider.wait_settled()

    # The second run worked in the very worktree the first one left, and saw it fresh.
    assert first.changes is not None
    assert first.changes.commit is not None
    assert first.changes.files_changed == 3
    assert provider.inner.cwds[0] == provider.inner.cwds[1]  # type: ignore[attr-defined]
    assert seen.tree == fresh.tree
    assert seen.status == fresh.status == ""
    assert seen.commit == fresh.commit == base
    assert second.changes is not None
    assert second.changes.commit is None
    assert seen.head == f"refs/heads/{second.changes.branch}"
    assert fresh.head == f"refs/heads/{cold.changes.branch}"
    # The first run's work is on its branch; the second's empty branch is gone.
    shown = git_out(repo, "show", "--name-status", "--format=%an", first.changes.commit)
    assert shown.split() == ["dsh-worktree", "A", "added.txt", "D", "gone.txt", "M", "shared.txt"]
    assert sorted(git_out(repo, "branch", "--format=%(refname:short)").split()) == sorted(
        ["main", first.changes.branch]
    )
    assert _worktrees(repo) == [str(repo)]


async def test_after_the_result_the_branch_is_checked_out_nowhere(
    repo: Path, tmp_path: Path
) -> None:
    def edit(cwd: Path) -> None:
        (cwd / "shared.txt").write_text("x\n", encoding="utf-8")

    async with _warm(edit, tmp_path, warm=2) as provider:
        await provider.prewarm(str(repo))
        result = await _run(provider, repo)
        # Still before the background recycle has had a chance to run.
        assert result.changes is not None
        assert result.changes.commit is not None
        assert result.changes.worktree is None
        # The run's branch is checked out nowhere; the idle worktree waits on its own.
        main, *idle = _checked_out_branches(repo)
        assert main == "main"
        assert result.changes.branch not in idle
        assert len(idle) == 1
        git_out(repo, "branch", "--copy", result.changes.branch, "copy")  # usable at once
        await provider.wait_settled()
        repository = await open_repository(str(repo), git_executable())
        assert provider.warm_count(repository) == 2
    assert _worktrees(repo) == [str(repo)]


async def test_dispose_removes_every_worktree_and_ends_every_process(
    repo: Path, tmp_path: Path
) -> None:
    from dsh_subprocess.testing import ProcessWatch

    with ProcessWatch() as watch:
        provider = _warm(None, tmp_path, warm=3)
        async with provider:
            await provider.prewarm(str(repo))
            assert len(_worktrees(repo)) == 4
            await _run(provider, repo)
            # dispose with background work possibly still under way
        assert _worktrees(repo) == [str(repo)]
        assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]
        assert not any((tmp_path / "wt").rglob("shared.txt"))
        assert watch.alive() == []
        await provider.dispose()  # idempotent


async def test_dispose_while_filling_removes_the_partial_pool(repo: Path, tmp_path: Path) -> None:
    provider = _warm(None, tmp_path, warm=4)
    async with provider:
        repository = await open_repository(str(repo), git_executable())
        assert provider._pool is not None
        provider._pool.prepare(repository, git_out(repo, "rev-parse", "HEAD"))
    assert _worktrees(repo) == [str(repo)]


async def test_parallel_claims_never_collide(repo: Path, tmp_path: Path) -> None:
    def edit(cwd: Path) -> None:
        (cwd / "shared.txt").write_text(f"written in {cwd.name}\n", encoding="utf-8")

    results: list[SubagentResult] = []
    async with _warm(edit, tmp_path, warm=4) as provider:
        await provider.prewarm(str(repo))
        async with SubagentService() as service:
            service.register_provider(provider)

            async def one() -> None:
                results.append(await delegate(service, "edit", provider="editor", cwd=repo))

            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(one)
        cwds = provider.inner.cwds  # type: ignore[attr-defined]
    assert len(set(cwds)) == 4
    branches = set()
    for result in results:
        assert result.stop_reason == COMPLETED
        assert result.changes is not None
        assert result.changes.commit is not None
        branches.add(result.changes.branch)
        text = git_out(repo, "show", f"{result.changes.commit}:shared.txt")
        assert text.startswith("written in ")
    assert len(branches) == 4
    assert _worktrees(repo) == [str(repo)]
    assert git_out(repo, "status", "--porcelain") == ""


async def test_a_moved_base_falls_back_to_a_fresh_checkout_that_joins_the_pool(
    repo: Path, tmp_path: Path
) -> None:
    seen = Observer()
    async with _warm(seen, tmp_path, warm=1) as provider:
        await provider.prewarm(str(repo))
        (pooled,) = [path for path in _worktrees(repo) if path != str(repo)]
        (repo / "later.txt").write_text("a later commit\n", encoding="utf-8")
        git_out(repo, "add", "later.txt")
        git_out(repo, "commit", "--quiet", "-m", "later")
        result = await _run(provider, repo)
        assert seen.commit == git_out(repo, "rev-parse", "HEAD")
        assert "later.txt" in seen.tree
        assert provider.inner.cwds[0] != pooled  # type: ignore[attr-defined]
        await provider.wait_settled()
        (joined,) = [path for path in _worktrees(repo) if path != str(repo)]
        assert joined == provider.inner.cwds[0]  # type: ignore[attr-defined]
        assert git_out(joined, "rev-parse", "HEAD") == seen.commit
    assert result.changes is not None
    assert result.changes.base == seen.commit
    assert _worktrees(repo) == [str(repo)]


async def test_an_existing_branch_is_refused_and_the_worktree_stays_ready(
    repo: Path, tmp_path: Path
) -> None:
    git_out(repo, "branch", "taken")
    async with _warm(None, tmp_path, warm=1, branch="taken") as provider:
        await provider.prewarm(str(repo))
        with pytest.raises(WorktreeError, match="the branch 'taken' already exists"):
            await _run(provider, repo)
        repository = await open_repository(str(repo), git_executable())
        assert provider.warm_count(repository) == 1
        assert provider.inner.cwds == []  # type: ignore[attr-defined]  # nothing started
    assert git_out(repo, "rev-parse", "taken") == git_out(repo, "rev-parse", "main")


async def test_a_cancelled_pooled_run_is_committed_too(repo: Path, tmp_path: Path) -> None:
    def edit(cwd: Path) -> None:
        (cwd / "partial.txt").write_text("partial\n", encoding="utf-8")

    controller = CancelController()
    settings = Worktree(warm=1, root=str(tmp_path / "wt"))
    inner = EditingProvider(edit, hold=True)
    async with settings.isolate(inner) as provider:
        await provider.prewarm(str(repo))
        result: list[SubagentResult] = []

        async def run() -> None:
            result.append(await delegate(provider, "edit", cwd=repo, cancel=controller.signal))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await inner.started.wait()
            controller.cancel("test")
    (done,) = result
    assert done.stop_reason == ABORTED
    assert done.changes is not None
    assert done.changes.commit is not None
    message = git_out(repo, "log", "-1", "--format=%B", done.changes.commit)
    assert f"Run ended: {ABORTED}" in message
    assert _worktrees(repo) == [str(repo)]


async def test_without_entering_a_warm_provider_runs_cold(repo: Path, tmp_path: Path) -> None:
    provider = _warm(None, tmp_path, warm=2)
    with pytest.raises(RuntimeError, match="entered with warm > 0"):
        await provider.prewarm(str(repo))
    result = await _run(provider, repo)
    assert result.changes is not None
    assert result.changes.commit is None
    assert _worktrees(repo) == [str(repo)]


@pytest.mark.parametrize("bad", [-1, MAX_WARM + 1, True, "2", 1.5])
def test_bad_warm_settings_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        Worktree.model_validate({"warm": bad})
    assert caught.value.errors()[0]["loc"] == ("warm",)


def test_warm_is_off_by_default() -> None:
    assert Worktree().warm == 0


async def test_without_prewarm_the_pool_grows_by_the_worktrees_runs_needed(
    repo: Path, tmp_path: Path
) -> None:
    async with _warm(None, tmp_path, warm=2) as provider:
        results = []
        async with anyio.create_task_group() as group:

            async def one() -> None:
                results.append(await _run(provider, repo))

            for _ in range(3):  # three at once: three checkouts, two of them kept
                group.start_soon(one)
        await provider.wait_settled()
        assert len(_worktrees(repo)) == 3
        await _run(provider, repo)  # claims one of them: no new checkout
        await provider.wait_settled()
        assert len(_worktrees(repo)) == 3
        cwds = provider.inner.cwds  # type: ignore[attr-defined]
        assert cwds[3] in cwds[:3]
    assert [result.changes.commit for result in results if result.changes] == [None] * 3
    assert _worktrees(repo) == [str(repo)]


async def test_a_base_that_vanished_is_refused_and_the_ready_worktree_stays(
    repo: Path, tmp_path: Path
) -> None:
    git_out(repo, "branch", "feature")
    async with _warm(None, tmp_path, warm=1, base="feature") as provider:
        await provider.prewarm(str(repo))
        git_out(repo, "branch", "-D", "feature")
        with pytest.raises(WorktreeError, match="the base ref 'feature' does not name a commit"):
            await _run(provider, repo)
        repository = await open_repository(str(repo), git_executable())
        assert provider.warm_count(repository) == 1
        assert provider.inner.cwds == []  # type: ignore[attr-defined]
        # The ready worktree still waits at the old base, on a branch of its own.
        (ready,) = [path for path in _worktrees(repo) if path != str(repo)]
        (waiting,) = _checked_out_branches(repo)[1:]
        assert waiting.startswith("dsh/")
        assert git_out(ready, "status", "--porcelain").strip() == ""
        assert git_out(ready, "rev-parse", "HEAD") == git_out(repo, "rev-parse", "main")
    assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert _worktrees(repo) == [str(repo)]


async def test_a_subdirectory_cwd_claims_its_counterpart(repo: Path, tmp_path: Path) -> None:
    (repo / "fresh-dir").mkdir()  # untracked: the base has no such directory
    async with _warm(None, tmp_path, warm=1) as provider:
        await provider.prewarm(str(repo))
        for cwd in (repo / "sub", repo / "fresh-dir"):
            result = await delegate(provider, "look", cwd=cwd)
            assert result.changes is not None
            await provider.wait_settled()
        cwds = provider.inner.cwds  # type: ignore[attr-defined]
    assert [Path(cwd).name for cwd in cwds] == ["sub", "fresh-dir"]
    assert Path(cwds[0]).parent == Path(cwds[1]).parent  # the one worktree of the pool


async def test_a_worktree_handed_back_just_before_dispose_is_removed_too(
    repo: Path, tmp_path: Path
) -> None:
    # The recycle is scheduled and the pool closes before that task ever runs.
    async with _warm(None, tmp_path, warm=2) as provider:
        await provider.prewarm(str(repo))
        pool = provider._pool
        assert pool is not None
        (one_pool,) = pool._pools.values()
        slot = one_pool.idle.pop()
        await pool._give_back(one_pool, slot)
    assert _worktrees(repo) == [str(repo)]
