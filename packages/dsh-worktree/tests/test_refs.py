"""Refs read from git's files agree with git, and say ``None`` whenever they cannot tell.

The readers only decide the warm pool's fast path: every ``None`` here sends the pool
to git instead, so the cases that must answer ``None`` are as important as the ones
that must agree.
"""

from __future__ import annotations

from pathlib import Path

from dsh_worktree._refs import (
    branch_commit,
    detach_and_delete,
    head_commit,
    head_target,
    worktree_git_dir,
)
from dsh_worktree.testing import git_out


def test_head_on_a_loose_branch_reads_as_git_says(repo: Path) -> None:
    git_dir = worktree_git_dir(str(repo))
    assert git_dir == str(repo / ".git")
    assert head_target(git_dir) == "refs/heads/main"
    assert head_commit(git_dir, git_dir) == git_out(repo, "rev-parse", "HEAD")


def test_a_packed_branch_reads_from_packed_refs(repo: Path) -> None:
    git_out(repo, "branch", "side")
    git_out(repo, "pack-refs", "--all")
    git_dir = str(repo / ".git")
    assert not (repo / ".git" / "refs" / "heads" / "side").exists()
    assert branch_commit(git_dir, "refs/heads/side") == git_out(repo, "rev-parse", "side")
    assert head_commit(git_dir, git_dir) == git_out(repo, "rev-parse", "HEAD")


def test_a_loose_ref_wins_over_its_stale_packed_line(repo: Path) -> None:
    old = git_out(repo, "rev-parse", "HEAD")
    git_out(repo, "pack-refs", "--all")
    git_out(repo, "commit", "--quiet", "--allow-empty", "-m", "newer")
    new = git_out(repo, "rev-parse", "HEAD")
    assert new != old
    assert head_commit(str(repo / ".git"), str(repo / ".git")) == new


def test_a_detached_head_reads_as_its_commit(repo: Path) -> None:
    git_out(repo, "checkout", "--quiet", "--detach")
    git_dir = str(repo / ".git")
    assert head_target(git_dir) is None
    assert head_commit(git_dir, git_dir) == git_out(repo, "rev-parse", "HEAD")


def test_a_linked_worktree_has_its_own_head(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git_out(repo, "worktree", "add", "--quiet", "-b", "other", str(linked))
    git_dir = worktree_git_dir(str(linked))
    assert git_dir is not None
    assert Path(git_dir).parent.name == "worktrees"
    assert head_target(git_dir) == "refs/heads/other"
    assert head_commit(git_dir, str(repo / ".git")) == git_out(linked, "rev-parse", "HEAD")


def test_what_cannot_be_told_from_the_files_is_none(repo: Path, tmp_path: Path) -> None:
    git_dir = str(repo / ".git")
    # An unborn branch, a ref that is not a branch, garbage in a ref, a missing repository.
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/unborn\n", encoding="utf-8")
    assert head_commit(git_dir, git_dir) is None
    assert branch_commit(git_dir, "refs/tags/v1") is None
    (repo / ".git" / "refs" / "heads" / "junk").write_text("not a commit id\n", encoding="utf-8")
    assert branch_commit(git_dir, "refs/heads/junk") is None
    (repo / ".git" / "HEAD").write_text("ref: refs/remotes/origin/main\n", encoding="utf-8")
    assert head_commit(git_dir, git_dir) is None
    assert head_commit(str(tmp_path / "nowhere"), str(tmp_path / "nowhere")) is None
    assert worktree_git_dir(str(tmp_path)) is None


def test_a_reftable_repository_is_left_to_git(repo: Path) -> None:
    # Deliberate: with reftable storage the loose files are stubs, so nothing is read.
    (repo / ".git" / "reftable").mkdir()
    git_dir = str(repo / ".git")
    assert head_commit(git_dir, git_dir) is None
    assert branch_commit(git_dir, "refs/heads/main") is None


def _linked_on_branch(repo: Path, tmp_path: Path) -> tuple[Path, str, str]:
    linked = tmp_path / "linked"
    git_out(repo, "worktree", "add", "--quiet", "-b", "dsh/abc", str(linked))
    git_dir = worktree_git_dir(str(linked))
    assert git_dir is not None
    return linked, git_dir, git_out(repo, "rev-parse", "HEAD")


def test_detach_and_delete_leaves_what_git_would(repo: Path, tmp_path: Path) -> None:
    linked, git_dir, base = _linked_on_branch(repo, tmp_path)
    common = str(repo / ".git")
    assert detach_and_delete(git_dir, common, "refs/heads/dsh/abc", base)
    # Git reads the result as its own: HEAD detached at the base, the branch and its
    # reflog gone, no lock file left, nothing to repair.
    assert git_out(linked, "status", "--porcelain", "--branch").startswith("## HEAD (no branch)")
    assert git_out(linked, "rev-parse", "HEAD") == base
    assert git_out(repo, "branch", "--list", "dsh/abc") == ""
    assert not (repo / ".git" / "logs" / "refs" / "heads" / "dsh" / "abc").exists()
    assert not list(Path(common).rglob("*.lock"))
    assert git_out(repo, "fsck", "--no-progress") == ""
    git_out(repo, "branch", "dsh/abc")  # the name is free again


def test_detach_and_delete_refuses_anything_but_the_claimed_state(
    repo: Path, tmp_path: Path
) -> None:
    linked, git_dir, base = _linked_on_branch(repo, tmp_path)
    common = str(repo / ".git")
    ref = "refs/heads/dsh/abc"
    git_out(linked, "commit", "--quiet", "--allow-empty", "-m", "work")
    assert not detach_and_delete(git_dir, common, ref, base)  # the branch moved
    moved = git_out(repo, "rev-parse", "dsh/abc")
    assert not detach_and_delete(git_dir, common, "refs/heads/main", moved)  # not HEAD's
    git_out(repo, "pack-refs", "--all")
    git_out(linked, "checkout", "--quiet", "dsh/abc")
    assert not detach_and_delete(git_dir, common, ref, moved)  # packed: git's to rewrite
    # Nothing was changed by any refusal.
    assert git_out(linked, "symbolic-ref", "HEAD") == ref
    assert git_out(repo, "rev-parse", "dsh/abc") == moved
    assert not list(Path(common).rglob("*.lock"))


def test_a_lock_another_git_holds_makes_it_give_up_and_is_left_alone(
    repo: Path, tmp_path: Path
) -> None:
    _linked, git_dir, base = _linked_on_branch(repo, tmp_path)
    common = str(repo / ".git")
    locks = ("refs/heads/dsh/abc.lock", "packed-refs.lock")
    for held in (Path(git_dir) / "HEAD.lock", *(repo / ".git" / lock for lock in locks)):
        held.write_text("someone else's\n", encoding="utf-8")
        assert not detach_and_delete(git_dir, common, "refs/heads/dsh/abc", base)
        assert held.read_text(encoding="utf-8") == "someone else's\n"
        held.unlink()
    assert detach_and_delete(git_dir, common, "refs/heads/dsh/abc", base)
