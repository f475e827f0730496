"""A follow-up of an isolated run continues its work: the earlier run's branch, checked
out again at the earlier run's directory, committed onto (against real git; the real
products are the e2e worktree tier's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dsh_subagent import SubagentResult, delegate
from dsh_worktree import Worktree
from dsh_worktree.testing import git_out
from worktree_doubles import ContinuingProvider, Edit

pytestmark = pytest.mark.anyio


def _write(name: str, text: str = "") -> Edit:
    def edit(cwd: Path) -> None:
        if text:
            (cwd / name).write_text(text, encoding="utf-8")

    return edit


async def _two_runs(
    repo: Path,
    provider: ContinuingProvider,
    between: Callable[[SubagentResult], None] | None = None,
) -> tuple[SubagentResult, SubagentResult]:
    first = await delegate(provider, "first", cwd=repo, isolation=Worktree())
    if between is not None:
        between(first)
    follow = await delegate(
        provider, "follow", cwd=repo, isolation=Worktree(), resume=first.continuation
    )
    return first, follow


async def test_a_follow_up_commits_onto_the_earlier_runs_branch_in_its_directory(
    repo: Path,
) -> None:
    provider = ContinuingProvider([_write("a.txt", "one\n"), _write("b.txt", "two\n")])
    first, follow = await _two_runs(repo, provider)

    assert first.changes is not None
    assert follow.changes is not None
    handle = first.continuation
    assert handle is not None
    assert handle.branch == first.changes.branch
    assert handle.workspace is not None
    assert provider.cwds[0].startswith(handle.workspace)
    assert provider.cwds[1] == provider.cwds[0]  # the same directory again
    assert provider.resumed[1] == handle
    assert (follow.changes.branch, follow.changes.base) == (
        first.changes.branch,
        first.changes.commit,
    )
    branch = first.changes.branch
    assert git_out(repo, "rev-parse", f"{branch}^") == first.changes.commit
    assert git_out(repo, "show", f"{branch}:a.txt") == "one"
    assert git_out(repo, "show", f"{branch}:b.txt") == "two"
    assert git_out(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


async def test_a_follow_up_that_changes_nothing_keeps_the_earlier_runs_branch(
    repo: Path,
) -> None:
    provider = ContinuingProvider([_write("a.txt", "one\n"), _write("none")])
    first, follow = await _two_runs(repo, provider)

    assert first.changes is not None
    assert follow.changes is not None
    assert (follow.changes.branch, follow.changes.commit) == (first.changes.branch, None)
    assert git_out(repo, "rev-parse", first.changes.branch) == first.changes.commit
    assert follow.continuation is not None
    assert follow.continuation.branch == first.changes.branch  # a third run continues it too


async def test_a_follow_up_of_a_run_that_changed_nothing_starts_a_branch_of_its_own(
    repo: Path,
) -> None:
    provider = ContinuingProvider([_write("none"), _write("b.txt", "two\n")])
    first, follow = await _two_runs(repo, provider)

    assert first.changes is not None
    assert first.changes.commit is None
    assert first.continuation is not None
    assert first.continuation.branch is None
    assert follow.changes is not None
    assert follow.changes.commit is not None
    assert follow.changes.branch != first.changes.branch
    assert provider.cwds[1] == provider.cwds[0]  # still the earlier run's directory
    assert git_out(repo, "show", f"{follow.changes.branch}:b.txt") == "two"


async def test_a_follow_up_whose_directory_is_taken_works_in_its_own_on_the_same_branch(
    repo: Path,
) -> None:
    # A warm pool may have reused the earlier run's directory: the follow-up still
    # continues the branch, from a directory of its own (the taken one is left alone).
    provider = ContinuingProvider([_write("a.txt", "one\n"), _write("b.txt", "two\n")])

    def take(first: SubagentResult) -> None:
        assert first.continuation is not None
        assert first.continuation.workspace is not None
        Path(first.continuation.workspace).mkdir()
        (Path(first.continuation.workspace) / "someone-elses.txt").write_text("x\n", "utf-8")

    first, follow = await _two_runs(repo, provider, take)

    assert first.changes is not None
    assert follow.changes is not None
    assert provider.cwds[1] != provider.cwds[0]
    assert follow.changes.branch == first.changes.branch
    assert git_out(repo, "show", f"{first.changes.branch}:b.txt") == "two"
    assert first.continuation is not None
    assert first.continuation.workspace is not None
    assert (Path(first.continuation.workspace) / "someone-elses.txt").read_text("utf-8") == "x\n"
