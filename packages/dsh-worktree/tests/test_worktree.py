"""A git worktree per delegation, against real git: collect, refuse, recover, run in parallel."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    CancelController,
    ParentContext,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    delegate,
    render_changes,
)
from dsh_worktree import COMMIT_AUTHOR, Worktree, WorktreeError, WorktreeProvider
from dsh_worktree.repo import open_repository
from dsh_worktree.testing import git_out
from worktree_doubles import EditingProvider

pytestmark = pytest.mark.anyio


def _edit_all(cwd: Path) -> None:
    (cwd / "shared.txt").write_text("changed by the run\n", encoding="utf-8")
    (cwd / "gone.txt").unlink()
    (cwd / "added.txt").write_text("new file\nsecond line\n", encoding="utf-8")
    (cwd / "build.log").write_text("ignored output\n", encoding="utf-8")


def _main_state(repo: Path) -> tuple[str, str, str, str]:
    return (
        git_out(repo, "status", "--porcelain", "--untracked-files=all"),
        git_out(repo, "diff", "--cached"),
        git_out(repo, "stash", "list"),
        git_out(repo, "rev-parse", "HEAD", "main"),
    )


def _worktrees(repo: Path) -> list[str]:
    return [
        line.removeprefix("worktree ")
        for line in git_out(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def _exists(path: Path) -> bool:
    return path.exists()


def _branches(repo: Path) -> list[str]:
    return git_out(repo, "branch", "--format=%(refname:short)").split()


async def _delegate(provider: EditingProvider, cwd: Path, **settings: object) -> SubagentResult:
    return await delegate(provider, "edit", cwd=cwd, isolation=Worktree.model_validate(settings))


async def test_every_change_is_committed_on_its_branch_and_the_main_tree_is_untouched(
    repo: Path,
) -> None:
    # The main tree has its own uncommitted, staged and stashed changes: none may move.
    (repo / "shared.txt").write_text("stashed edit\n", encoding="utf-8")
    git_out(repo, "stash", "--quiet")
    (repo / "sub" / "inner.txt").write_text("uncommitted edit\n", encoding="utf-8")
    (repo / "staged.txt").write_text("staged\n", encoding="utf-8")
    git_out(repo, "add", "staged.txt")
    before = _main_state(repo)
    provider = EditingProvider(_edit_all)

    result = await _delegate(provider, repo)

    assert result.stop_reason == COMPLETED
    changes = result.changes
    assert changes is not None
    assert changes.commit is not None
    assert changes.base == git_out(repo, "rev-parse", "HEAD")
    assert changes.branch.startswith("dsh/")
    assert len(changes.branch) == len("dsh/") + 12
    assert (changes.files_changed, changes.insertions, changes.deletions) == (3, 3, 2)
    assert changes.worktree is None
    # The product worked in the worktree, never in the main tree.
    assert provider.cwds[0] != str(repo)
    assert not _exists(Path(provider.cwds[0]))
    # The branch holds exactly the run's changes, untracked-but-ignored files excluded.
    assert git_out(repo, "rev-parse", changes.branch) == changes.commit
    diff = git_out(repo, "diff", "--name-status", changes.base, changes.commit)
    assert sorted(diff.splitlines()) == ["A\tadded.txt", "D\tgone.txt", "M\tshared.txt"]
    assert git_out(repo, "show", f"{changes.commit}:shared.txt") == "changed by the run"
    assert git_out(repo, "log", "-1", "--format=%an <%ae>|%s", changes.commit) == (
        f"{COMMIT_AUTHOR} <dsh-worktree@localhost>|dsh: changes of delegation "
        f"{changes.branch.removeprefix('dsh/')} (completed)"
    )
    assert _main_state(repo) == before
    assert _worktrees(repo) == [str(repo)]
    assert render_changes(changes) == (
        f"Changes: committed on branch {changes.branch} (3 files changed, 3 insertions(+), "
        f"2 deletions(-)), commit {changes.commit[:12]}"
    )


async def test_nothing_changed_leaves_no_commit_and_deletes_the_branch(repo: Path) -> None:
    result = await _delegate(EditingProvider(), repo)

    assert result.changes is not None
    assert result.changes.commit is None
    assert _branches(repo) == ["main"]
    assert _worktrees(repo) == [str(repo)]
    assert (
        render_changes(result.changes) == f"Changes: none (branch {result.changes.branch} deleted)"
    )


async def test_an_ignored_file_alone_is_no_change(repo: Path) -> None:
    def ignored_only(cwd: Path) -> None:
        (cwd / "debug.log").write_text("noise\n", encoding="utf-8")

    result = await _delegate(EditingProvider(ignored_only), repo)

    assert result.changes is not None
    assert result.changes.commit is None


async def test_a_failed_run_is_committed_too_and_says_how_it_ended(repo: Path) -> None:
    result = await _delegate(EditingProvider(_edit_all, stop_reason=ERROR), repo)

    assert result.stop_reason == ERROR
    assert result.changes is not None
    assert result.changes.commit is not None
    subject = git_out(repo, "log", "-1", "--format=%s", result.changes.commit)
    assert subject.endswith("(error)")


async def test_a_cancelled_run_is_committed_too(repo: Path) -> None:
    provider = EditingProvider(_edit_all, hold=True)
    cancel = CancelController()
    async with anyio.create_task_group() as group:

        async def cancel_when_started() -> None:
            await provider.started.wait()
            cancel.cancel("test")

        group.start_soon(cancel_when_started)
        result = await delegate(
            provider, "edit", cwd=repo, cancel=cancel.signal, isolation=Worktree()
        )

    assert result.stop_reason == ABORTED
    assert result.changes is not None
    assert result.changes.commit is not None
    assert git_out(repo, "log", "-1", "--format=%s", result.changes.commit).endswith("(aborted)")
    assert _worktrees(repo) == [str(repo)]


async def test_dispose_without_asking_for_the_result_still_collects(repo: Path) -> None:
    provider = Worktree().isolate(EditingProvider(_edit_all, hold=True))
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start(
            "editor",
            SubagentStartRequest(
                prompt=(TextBlock(text="edit"),),
                parent=ParentContext(session_id="s", cwd=str(repo)),
            ),
        )
        await run.dispose()
        result = await run.result()

    assert result.changes is not None
    assert result.changes.commit is not None
    assert _worktrees(repo) == [str(repo)]


async def test_a_start_failure_removes_the_worktree_and_keeps_what_was_written(
    repo: Path,
) -> None:
    boom = SubagentError(SubagentErrorCode.PRODUCT_START_FAILED, "product failed to start")
    with pytest.raises(SubagentError, match="product failed to start"):
        await _delegate(EditingProvider(_edit_all, start_error=boom), repo)

    dsh_branches = [b for b in _branches(repo) if b.startswith("dsh/")]
    assert len(dsh_branches) == 1
    assert git_out(repo, "log", "-1", "--format=%s", dsh_branches[0]).endswith("(start-failed)")
    assert _worktrees(repo) == [str(repo)]


async def test_a_subdirectory_cwd_runs_in_the_worktree_counterpart(repo: Path) -> None:
    def edit_here(cwd: Path) -> None:
        (cwd / "here.txt").write_text("x\n", encoding="utf-8")

    provider = EditingProvider(edit_here)
    result = await _delegate(provider, repo / "sub")

    assert provider.cwds[0].endswith(f"{os.sep}sub")
    assert result.changes is not None
    assert result.changes.commit is not None
    names = git_out(repo, "diff", "--name-only", result.changes.base, result.changes.commit)
    assert names == "sub/here.txt"


async def test_settings_base_branch_root_and_keep(repo: Path, tmp_path: Path) -> None:
    first = git_out(repo, "rev-parse", "HEAD")
    (repo / "later.txt").write_text("later\n", encoding="utf-8")
    git_out(repo, "add", "later.txt")
    git_out(repo, "commit", "--quiet", "-m", "later")
    root = tmp_path / "trees"
    provider = EditingProvider(_edit_all)

    result = await _delegate(
        provider, repo, base=first, branch="task/{id}-x", root=str(root), keep=True
    )

    changes = result.changes
    assert changes is not None
    assert changes.commit is not None
    assert changes.base == first
    assert changes.branch.startswith("task/")
    assert changes.branch.endswith("-x")
    assert changes.worktree is not None
    assert changes.worktree.startswith(str(root))
    assert _exists(Path(changes.worktree, "added.txt"))
    assert not _exists(Path(changes.worktree, "later.txt"))
    assert "locked" not in git_out(repo, "worktree", "list", "--porcelain")
    assert len(_worktrees(repo)) == 2


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no-repo", "not inside a git repository"),
        ("bare", "bare repository"),
        ("git-dir", "not inside the repository's working tree"),
        ("unknown-base", "does not name a commit"),
        ("existing-branch", "already exists"),
        ("invalid-branch", "is not a valid branch name"),
        ("no-cwd", "no working directory"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_created(
    repo: Path, tmp_path: Path, case: str, message: str
) -> None:
    settings = Worktree()
    cwd: Path | None = repo
    if case == "no-repo":
        cwd = tmp_path / "plain"
        cwd.mkdir()
    elif case == "bare":
        cwd = tmp_path / "bare.git"
        git_out(tmp_path, "init", "--quiet", "--bare", str(cwd))
    elif case == "git-dir":
        cwd = repo / ".git"
    elif case == "unknown-base":
        settings = Worktree(base="no-such-ref")
    elif case == "existing-branch":
        git_out(repo, "branch", "taken")
        settings = Worktree(branch="taken")
    elif case == "invalid-branch":
        settings = Worktree(branch="bad..name{id}")
    else:
        cwd = None
    provider = EditingProvider(_edit_all)
    branches = _branches(repo)

    async with SubagentService() as service:
        service.register_provider(settings.isolate(provider))
        with pytest.raises(WorktreeError, match=message) as caught:
            await service.start(
                "editor",
                SubagentStartRequest(
                    prompt=(TextBlock(text="edit"),),
                    parent=ParentContext(session_id="s", cwd=None if cwd is None else str(cwd)),
                ),
            )

    assert caught.value.code == SubagentErrorCode.INVALID_REQUEST
    assert caught.value.message.startswith("worktree: ")
    assert provider.cwds == []  # the product was never started
    assert _branches(repo) == branches
    assert _worktrees(repo) == [str(repo)]
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "dsh").exists()


def test_settings_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match=r"only the \{id\} placeholder"):
        Worktree(branch="dsh/{name}")
    with pytest.raises(ValueError, match="is not a ref"):
        Worktree(base="--orphan")
    with pytest.raises(ValueError, match="Extra inputs"):
        Worktree.model_validate({"bogus": 1})


async def test_a_provider_with_a_configured_cwd_is_refused(tmp_path: Path) -> None:
    from dsh_subagent_codex import CodexConfig, CodexProvider

    with pytest.raises(WorktreeError, match="configures a cwd"):
        Worktree().isolate(CodexProvider(CodexConfig(cwd=str(tmp_path))))


async def test_delegate_through_a_service_refuses_isolation(repo: Path) -> None:
    async with SubagentService() as service:
        service.register_provider(EditingProvider())
        with pytest.raises(SubagentError, match=r"register isolation\.isolate"):
            await delegate(service, "x", cwd=repo, provider="editor", isolation=Worktree())


async def test_the_wrapper_keeps_the_inner_providers_face() -> None:
    inner = EditingProvider(name="named")
    wrapped = WorktreeProvider(inner)
    assert (wrapped.name, wrapped.capabilities, wrapped.inherits_parent_context) == (
        "named",
        inner.capabilities,
        False,
    )
    assert wrapped.honours_budgets is inner.honours_budgets
    assert wrapped.inner is inner


async def test_parallel_runs_on_one_repository_never_collide(repo: Path) -> None:
    count = 8

    def writer(index: int) -> Callable[[Path], None]:
        def edit(cwd: Path) -> None:
            (cwd / "shared.txt").write_text(f"version {index}\n", encoding="utf-8")

        return edit

    results: dict[int, SubagentResult] = {}

    async def one(index: int) -> None:
        results[index] = await _delegate(EditingProvider(writer(index)), repo)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)

    branches = set()
    for index, result in results.items():
        changes = result.changes
        assert changes is not None
        assert changes.commit is not None
        assert git_out(repo, "show", f"{changes.branch}:shared.txt") == f"version {index}"
        branches.add(changes.branch)
    assert len(branches) == count
    assert _worktrees(repo) == [str(repo)]
    assert git_out(repo, "status", "--porcelain") == ""


async def test_repository_hooks_cannot_refuse_the_commit_that_keeps_the_work(
    repo: Path, tmp_path: Path
) -> None:
    # Deliberate: dsh-worktree's own git commands run with hooks off, so a failing
    # pre-commit hook cannot lose a run's work and no hook runs on the user's behalf.
    hooks = repo / ".git" / "hooks"
    marker = tmp_path / "hook-ran"
    for name in ("pre-commit", "post-checkout", "commit-msg"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n", encoding="utf-8")
        hook.chmod(0o755)

    result = await _delegate(EditingProvider(_edit_all), repo)

    assert result.changes is not None
    assert result.changes.commit is not None
    assert not _exists(marker)


@pytest.mark.parametrize("made", [False, True], ids=["missing", "not-a-repository"])
async def test_a_cwd_with_a_newline_or_an_escape_is_named_on_one_line(
    tmp_path: Path, made: bool
) -> None:
    """The message reaches a terminal (``dsh worktrees``, ``dsh run --worktree``)."""
    cwd = tmp_path / "a\nb\x1b[31m"
    if made:
        cwd.mkdir()
    with pytest.raises(WorktreeError) as caught:
        await open_repository(str(cwd), "git")
    problem = "not inside a git repository" if made else "not an accessible directory"
    assert caught.value.message == f"worktree: the cwd is {problem}: {str(cwd)!r}"
