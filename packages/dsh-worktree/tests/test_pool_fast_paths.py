"""The warm pool's fast paths against real git: a claim that runs no git command, an
unchanged collection that runs one, and every way around them that must not lose work.

Git commands are counted where dsh-worktree starts them (``dsh_worktree._git.spawn``).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_subagent import CancelController, SubagentResult, delegate
from dsh_subprocess import ManagedProcess, SpawnSpec, spawn
from dsh_worktree import Worktree, WorktreeProvider
from dsh_worktree import _git as git_module
from dsh_worktree._tree_watch import TreeWatch
from dsh_worktree.testing import git_out
from worktree_doubles import Edit, EditingProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform != "linux", reason="the tree watch is Linux inotify"),
]


@pytest.fixture
def git_commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every git command dsh-worktree starts, as its arguments after the ``-c`` options."""
    seen: list[tuple[str, ...]] = []
    real = spawn

    async def counting(spec: SpawnSpec, **kwargs: Any) -> ManagedProcess:
        args = list(spec.argv[1:])
        while args[:1] == ["-c"]:
            args = args[2:]
        seen.append(tuple(args))
        return await real(spec, **kwargs)

    monkeypatch.setattr(git_module, "spawn", counting)
    return seen


def _warm(edit: Edit | None, tmp_path: Path, **kw: object) -> WorktreeProvider:
    settings = Worktree.model_validate({"warm": 1, "root": str(tmp_path / "wt"), **kw})
    return settings.isolate(EditingProvider(edit))


async def _run(provider: WorktreeProvider, repo: Path) -> SubagentResult:
    return await delegate(provider, "edit", cwd=repo)


async def _warmed(provider: WorktreeProvider, repo: Path) -> None:
    """Prewarm, then one run from ``repo`` so the pool knows the cwd."""
    await provider.prewarm(str(repo))
    await _run(provider, repo)
    await provider.wait_settled()


async def test_an_untouched_run_runs_no_git_on_its_path(
    repo: Path, tmp_path: Path, git_commands: list[tuple[str, ...]]
) -> None:
    async with _warm(None, tmp_path) as provider:
        await _warmed(provider, repo)
        git_commands.clear()
        result = await _run(provider, repo)
        await provider.wait_settled()
        ran = [args[0] for args in git_commands]
    # Neither the claim nor the collection ran git (refs read and written as git's files);
    # what ran is the background recycle: reset, clean, the next branch.
    assert ran == ["reset", "clean", "switch"]
    assert not any(args[0] in ("status", "rev-parse") for args in git_commands)
    assert result.changes is not None
    assert result.changes.commit is None
    branch = result.changes.branch
    assert branch.startswith("dsh/")
    assert git_out(repo, "branch", "--list", branch) == ""  # deleted, as the result says
    assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]


async def test_a_written_file_takes_the_git_status_path_and_is_committed(
    repo: Path, tmp_path: Path, git_commands: list[tuple[str, ...]]
) -> None:
    writes = iter([None, "kept\n"])

    def edit(cwd: Path) -> None:
        if (text := next(writes)) is not None:
            (cwd / "sub" / "inner.txt").write_text(text, encoding="utf-8")

    async with _warm(edit, tmp_path) as provider:
        await _warmed(provider, repo)
        git_commands.clear()
        result = await _run(provider, repo)
    assert git_commands[0][:1] == ("status",)
    assert result.changes is not None
    assert result.changes.commit is not None
    assert git_out(repo, "show", f"{result.changes.commit}:sub/inner.txt") == "kept"


@pytest.mark.parametrize(
    "git_args",
    [
        pytest.param(("commit", "--quiet", "--allow-empty", "-m", "by the product"), id="commit"),
        pytest.param(("checkout", "--quiet", "--detach"), id="detached-head"),
    ],
)
async def test_git_work_that_writes_no_file_is_still_seen(
    repo: Path, tmp_path: Path, git_args: tuple[str, ...]
) -> None:
    """The watch sees files only; a commit or a moved HEAD is read from the refs."""
    runs = iter([False, True])

    def edit(cwd: Path) -> None:
        if next(runs):
            git_out(cwd, *git_args)

    async with _warm(edit, tmp_path) as provider:
        await _warmed(provider, repo)
        result = await _run(provider, repo)
    assert result.changes is not None
    if git_args[0] == "commit":
        assert result.changes.commit is not None
        span = f"{result.changes.base}..{result.changes.commit}"
        message = git_out(repo, "log", "--format=%s", span)
        assert "by the product" in message.splitlines()
    else:
        # Detached by the product: git status decided, as without the watch.
        assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]


async def test_a_worktree_claimed_while_its_watch_was_being_armed_has_no_watch(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch armed after the run had written would vouch for a tree it never saw change:
    the collection must then ask git."""
    entered, go = threading.Event(), threading.Event()
    real_arm = TreeWatch.arm
    holding = {"on": False}

    def slow_arm(root: str) -> TreeWatch | None:
        if holding["on"]:
            entered.set()
            go.wait()
        return real_arm(root)

    def edit(cwd: Path) -> None:
        if holding["on"]:
            (cwd / "shared.txt").write_text("written before the watch was armed\n", "utf-8")

    monkeypatch.setattr(TreeWatch, "arm", staticmethod(slow_arm))
    controller = CancelController()
    inner = EditingProvider(edit, hold=True)
    async with Worktree(warm=1, root=str(tmp_path / "wt")).isolate(inner) as provider:
        await provider.prewarm(str(repo))
        holding["on"] = True  # the recycle after the first run arms slowly
        first = CancelController()
        async with anyio.create_task_group() as group:
            group.start_soon(_held, provider, repo, first, [])
            await inner.started.wait()
            first.cancel("next")
        await anyio.to_thread.run_sync(entered.wait)  # idle again, its watch being armed
        inner.started = anyio.Event()
        results: list[SubagentResult] = []
        async with anyio.create_task_group() as group:
            group.start_soon(_held, provider, repo, controller, results)
            await inner.started.wait()  # claimed, and the file written
            go.set()
            await provider.wait_settled()  # the watch is armed now, on the written tree
            controller.cancel("collect")
    (result,) = results
    assert result.changes is not None
    assert result.changes.commit is not None
    text = git_out(repo, "show", f"{result.changes.commit}:shared.txt")
    assert text == "written before the watch was armed"


async def _held(
    provider: WorktreeProvider,
    repo: Path,
    controller: CancelController,
    results: list[SubagentResult],
) -> None:
    results.append(await delegate(provider, "edit", cwd=repo, cancel=controller.signal))


async def test_a_moved_head_skips_the_file_claim_and_replaces_the_pool(
    repo: Path, tmp_path: Path, git_commands: list[tuple[str, ...]]
) -> None:
    async with _warm(None, tmp_path) as provider:
        await _warmed(provider, repo)
        git_out(repo, "commit", "--quiet", "--allow-empty", "-m", "moved")
        git_commands.clear()
        result = await _run(provider, repo)
        assert git_commands[0][:1] == ("rev-parse",)  # the files said: ask git
        await provider.wait_settled()
    assert result.changes is not None
    assert result.changes.base == git_out(repo, "rev-parse", "HEAD")
    assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]


async def test_a_pattern_without_id_keeps_idle_worktrees_detached(
    repo: Path, tmp_path: Path
) -> None:
    async with _warm(None, tmp_path, branch="work") as provider:
        await provider.prewarm(str(repo))
        assert git_out(repo, "branch", "--format=%(refname:short)").split() == ["main"]
        result = await _run(provider, repo)
    assert result.changes is not None
    assert result.changes.branch == "work"
    assert result.changes.commit is None
