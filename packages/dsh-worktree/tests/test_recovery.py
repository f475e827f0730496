"""Crash safety against real git: a host killed mid-run, recovered by the next run."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import anyio
import pytest
from dsh_subprocess import SpawnSpec, spawn
from dsh_worktree import (
    Worktree,
    list_worktrees,
    open_repository,
    prune,
    recover,
    recover_repository,
)
from dsh_worktree._git import git_executable
from dsh_worktree.lifecycle import collect, create, new_run_id
from dsh_worktree.owner import Owner, current_owner, parse_reason
from dsh_worktree.repo import resolve_base
from dsh_worktree.testing import git_out
from worktree_doubles import EditingProvider

pytestmark = pytest.mark.anyio

HOST = str(Path(__file__).with_name("killed_host.py"))
DEADLINE = 60.0


def _worktrees(repo: Path) -> list[str]:
    return [
        line.removeprefix("worktree ")
        for line in git_out(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


async def _killed_host_worktree(repo: Path, tmp_path: Path, warm: int = 0) -> Path:
    """Run the host until its product wrote a file, SIGKILL it; the worktree it left."""
    ready = tmp_path / "ready"
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, HOST, str(repo), str(ready), str(warm)),
            cwd=str(tmp_path),
            stdin="devnull",
            stdout="devnull",
            host_death_guard=False,
            grace=0.5,
        )
    )
    async with host:
        with anyio.fail_after(DEADLINE):
            while not ready.exists() and host.exit_facts is None:  # noqa: ASYNC110 - another process writes it
                await anyio.sleep(0.05)
        assert ready.exists(), "the host ended before its run wrote"
        os.kill(host.pid, signal.SIGKILL)
        facts = await host.wait()
    assert facts.signal == "SIGKILL"
    return Path(ready.read_text(encoding="utf-8"))


async def test_a_host_killed_mid_run_is_recovered_by_the_next_isolated_run(
    repo: Path, tmp_path: Path
) -> None:
    left = await _killed_host_worktree(repo, tmp_path)
    assert (left / "written-before-the-kill.txt").exists()
    repository = await open_repository(str(repo), git_executable())
    (owned,) = await list_worktrees(repository)
    assert (owned.path, owned.state, owned.missing) == (str(left), "abandoned", False)
    assert "locked dsh-worktree host=" in git_out(repo, "worktree", "list", "--porcelain")

    from dsh_subagent import delegate

    result = await delegate(EditingProvider(), "next", cwd=repo, isolation=Worktree())

    assert result.changes is not None
    assert result.changes.commit is None
    assert owned.branch is not None
    log = git_out(repo, "log", "-1", "--format=%s", owned.branch)
    assert log == f"dsh: changes of delegation {owned.owner.id} (abandoned)"
    assert git_out(repo, "show", f"{owned.branch}:written-before-the-kill.txt") == "partial work"
    assert _worktrees(repo) == [str(repo)]
    assert not left.exists()


async def test_recover_repository_is_the_explicit_recovery(repo: Path, tmp_path: Path) -> None:
    left = await _killed_host_worktree(repo, tmp_path)

    repository, done = await recover_repository(str(repo))

    (item,) = done
    assert (item.path, item.action) == (str(left), "committed")
    assert item.commit is not None
    assert item.branch is not None
    assert git_out(repo, "rev-parse", item.branch) == item.commit
    assert await list_worktrees(repository) == []


async def _created(repo: Path) -> tuple[Path, str, str]:
    repository = await open_repository(str(repo))  # the git every dsh-worktree command uses
    base = await resolve_base(repository, "HEAD")
    run_id = new_run_id()
    active = await create(repository, Worktree(), base, f"dsh/{run_id}", run_id)
    return Path(active.path), active.branch, base


async def _relock(repo: Path, path: Path, owner: Owner) -> None:
    git_out(repo, "worktree", "unlock", str(path))
    git_out(repo, "worktree", "lock", "--reason", owner.reason(), str(path))


async def test_a_live_owners_worktree_is_left_alone(repo: Path) -> None:
    path, _, _ = await _created(repo)
    repository = await open_repository(str(repo), git_executable())

    assert await recover(repository) == []
    (owned,) = await list_worktrees(repository)
    assert owned.state == "live"
    assert path.exists()
    await _relock(repo, path, Owner("-", "-", 0, "-", owned.owner.base, owned.owner.id))
    (item,) = await recover(repository)
    assert item.action == "empty"


async def test_another_hosts_worktree_is_never_touched(repo: Path) -> None:
    path, _, base = await _created(repo)
    repository = await open_repository(str(repo), git_executable())
    mine = current_owner(base, "x")
    foreign = Owner(socket.gethostname() + "-elsewhere", mine.boot, 1, "1.00", base, "x")
    await _relock(repo, path, foreign)

    assert await prune(repository) == []
    (owned,) = await list_worktrees(repository)
    assert owned.state == "foreign"
    assert path.exists()


async def test_a_vanished_worktree_is_pruned_and_its_empty_branch_deleted(repo: Path) -> None:
    path, branch, base = await _created(repo)
    await _relock(repo, path, Owner("-", "-", 0, "-", base, "gone"))
    git_out(repo, "worktree", "list")  # still listed
    import shutil

    shutil.rmtree(path)
    repository = await open_repository(str(repo), git_executable())

    (item,) = await recover(repository)

    assert item.action == "pruned"
    assert branch not in git_out(repo, "branch")
    assert _worktrees(repo) == [str(repo)]


async def test_a_half_created_worktree_is_discarded(repo: Path) -> None:
    path, branch, base = await _created(repo)
    admin = Path(git_out(path, "rev-parse", "--absolute-git-dir"))
    (admin / "dsh-worktree-ready").unlink()
    (path / "shared.txt").unlink()  # what an interrupted checkout looks like
    await _relock(repo, path, Owner("-", "-", 0, "-", base, "half"))
    repository = await open_repository(str(repo), git_executable())

    (item,) = await recover(repository)

    assert item.action == "discarded"
    assert branch not in git_out(repo, "branch")
    assert not path.exists()


def test_lock_reasons_round_trip() -> None:
    owner = current_owner("abc", "123")
    assert parse_reason(owner.reason()) == owner
    assert owner.state() == "live"
    assert parse_reason("some other reason") is None
    assert parse_reason("dsh-worktree host=h pid=notanumber") is None


async def test_a_host_killed_with_a_warm_pool_is_recovered(repo: Path, tmp_path: Path) -> None:
    # The killed host held two warm worktrees: one claimed by the run (on its branch, a
    # file written), one idle (on a branch of its own at the base, nothing written).
    left = await _killed_host_worktree(repo, tmp_path, warm=2)
    repository = await open_repository(str(repo), git_executable())
    owned = await list_worktrees(repository)
    assert len(owned) == 2
    assert {item.state for item in owned} == {"abandoned"}
    claimed = next(item for item in owned if item.path == str(left))
    idle = next(item for item in owned if item.path != str(left))
    assert claimed.branch is not None
    assert idle.branch is not None

    done = await recover(repository)

    actions = sorted((item.action, item.branch) for item in done)
    assert actions == [("committed", claimed.branch), ("empty", idle.branch)]
    assert sorted(git_out(repo, "branch", "--format=%(refname:short)").split()) == sorted(
        ["main", claimed.branch]
    )
    commit = next(item.commit for item in done if item.action == "committed")
    assert commit is not None
    assert git_out(repo, "show", f"{commit}:written-before-the-kill.txt") == "partial work"
    message = git_out(repo, "log", "-1", "--format=%B", commit)
    assert "Run ended: abandoned" in message
    assert claimed.branch is not None
    run_id = claimed.branch.removeprefix("dsh/")
    assert f"Delegation: {run_id}" in message  # the claimed run, not the warm slot
    assert _worktrees(repo) == [str(repo)]


@pytest.mark.parametrize(
    ("state", "action"),
    [("unchanged", "empty"), ("half-created", "discarded"), ("vanished", "pruned")],
)
async def test_a_follow_ups_worktree_never_takes_the_earlier_runs_branch_with_it(
    repo: Path, state: str, action: str
) -> None:
    # A follow-up checks out the earlier run's branch itself; its owner died. Whatever
    # recovery finds, that branch stays where the earlier run left it.
    repository = await open_repository(str(repo), git_executable())
    base = await resolve_base(repository, "HEAD")
    git_out(repo, "branch", "dsh/earlier")
    run_id = new_run_id()
    active = await create(repository, Worktree(), base, "dsh/earlier", run_id, existing=True)
    path = Path(active.path)
    await _relock(repo, path, Owner("-", "-", 0, "-", base, run_id, continues=True))
    if state == "half-created":
        (Path(git_out(path, "rev-parse", "--absolute-git-dir")) / "dsh-worktree-ready").unlink()
    elif state == "vanished":
        import shutil

        shutil.rmtree(path)

    (item,) = await recover(repository)

    assert (item.action, item.branch) == (action, "dsh/earlier")
    assert git_out(repo, "rev-parse", "dsh/earlier") == base
    assert _worktrees(repo) == [str(repo)]


async def test_an_unchanged_follow_up_keeps_the_earlier_runs_branch(repo: Path) -> None:
    repository = await open_repository(str(repo), git_executable())
    base = await resolve_base(repository, "HEAD")
    git_out(repo, "branch", "dsh/earlier")
    active = await create(repository, Worktree(), base, "dsh/earlier", new_run_id(), existing=True)
    assert not active.owns_branch

    changes = await collect(active, "scripted", "completed")

    assert (changes.branch, changes.commit) == ("dsh/earlier", None)
    assert git_out(repo, "rev-parse", "dsh/earlier") == base
    assert _worktrees(repo) == [str(repo)]
