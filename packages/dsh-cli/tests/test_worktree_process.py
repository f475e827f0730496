"""Worktree isolation on the real ``dsh`` executable and real git: what is refused before
anything runs, how a batch's branches name their tasks, the lines for what is accepted on
the user's behalf, and a ``kill -9`` of ``dsh`` at every git step of creating and
collecting a worktree, each followed by recovery with nothing lost.

The sandbox is :mod:`cli_sandbox`'s; the product is the example provider's scripted child
(``dsh-example/write NAME`` writes the task text into ``NAME`` in its cwd). The kills use
:mod:`git_stop`, a ``git`` on ``PATH`` that stops dead at one step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_sandbox import Sandbox, finish, no_traceback, run, wait_for_file
from cli_sandbox import dsh as start_dsh
from dsh_subagent import ContinuationHandle
from dsh_worktree.testing import private_git_env

HELD = "T-" + "0e0e0e01"
REAL_GIT = shutil.which("git")
GIT_STOP = Path(__file__).with_name("git_stop.py")


def _git(box: Sandbox, cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=box.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def repo(sandbox: Sandbox) -> Path:
    """A repository with one commit, git confined to the sandbox's HOME."""
    assert REAL_GIT is not None, "git is not on PATH"
    sandbox.env.update(private_git_env(Path(sandbox.env["HOME"])))
    root = sandbox.root / "repo"
    root.mkdir()
    _git(sandbox, root, "init", "--quiet")
    (root / "readme.txt").write_text("hello\n", encoding="utf-8")
    _git(sandbox, root, "add", "--all")
    _git(sandbox, root, "commit", "--quiet", "-m", "initial")
    return root


def _tasks(box: Sandbox, *lines: dict[str, Any]) -> Path:
    path = box.root / "tasks.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _batch(box: Sandbox, tasks: Path, out: Path, repo: Path, *extra: str) -> list[str]:
    return [
        "batch", str(box.profile), "subagent_example", str(tasks), "--out", str(out),
        "--cwd", str(repo), "--worktree", *extra,
    ]  # fmt: skip


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _branches(box: Sandbox, repo: Path) -> list[str]:
    names = _git(box, repo, "branch", "--format=%(refname:short)").split()
    return [name for name in names if name != "main"]


# --- refused before anything runs --------------------------------------------------------


@pytest.mark.parametrize("where", ["inside", "file"])
def test_batch_refuses_a_bad_worktree_root_before_anything_runs(
    sandbox: Sandbox, repo: Path, where: str
) -> None:
    root = repo / "wt" if where == "inside" else sandbox.profile / "wt"
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": f"dsh-contract/1 hold {HELD}"},
        {"id": "b", "task": "dsh-example/write b.txt"},
    )
    out = sandbox.root / "results.jsonl"
    code, stdout, err = run(
        sandbox, *_batch(sandbox, tasks, out, repo, "--worktree-root", str(root))
    )
    assert code == 2, err
    assert stdout == ""
    expected = (
        f"the worktree root must be outside the repository's working tree: {root}"
        if where == "inside"
        else f"the worktree root is not a directory: {root} ({sandbox.profile} is a file)"
    )
    assert err == f"dsh: error: worktree: {expected}\n"
    assert not out.exists()  # nothing recorded: a rerun with a good root runs every task
    assert not (sandbox.root / HELD).exists()  # nothing started


def test_batch_refuses_one_fixed_branch_for_several_tasks(sandbox: Sandbox, repo: Path) -> None:
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": f"dsh-contract/1 hold {HELD}"},
        {"id": "b", "task": "dsh-example/write b.txt"},
    )
    out = sandbox.root / "results.jsonl"
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, repo, "--worktree-branch", "fixed"))
    assert code == 2, err
    assert err == (
        "dsh: error: --worktree-branch 'fixed' names one branch for 2 tasks; give a pattern "
        "with {id} (the default is dsh/{id}); nothing started\n"
    )
    assert not out.exists()
    assert not (sandbox.root / HELD).exists()
    assert _branches(sandbox, repo) == []


def test_run_refuses_a_worktree_root_inside_the_repository(sandbox: Sandbox, repo: Path) -> None:
    root = repo / "worktrees"
    code, stdout, err = run(
        sandbox, "run", str(sandbox.profile), "subagent_example", f"dsh-contract/1 hold {HELD}",
        "--cwd", str(repo), "--worktree", "--worktree-root", str(root),
    )  # fmt: skip
    assert code == 2, err
    assert stdout == ""
    assert err == (
        "dsh: error: worktree: the worktree root must be outside the repository's working "
        f"tree: {root}\n"
    )
    assert not (sandbox.root / HELD).exists()
    assert not root.exists()


def test_j_is_the_short_form_of_concurrency(sandbox: Sandbox, repo: Path) -> None:
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": "dsh-example/write a.txt"},
        {"id": "b", "task": "dsh-example/write b.txt"},
    )
    out = sandbox.root / "results.jsonl"
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, repo, "-j", "2"))
    assert code == 0, err
    assert [r["stop_reason"] for r in _records(out)] == ["completed", "completed"]
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, repo, "-j", "0"))
    assert code == 2
    assert "argument -j/--concurrency: must be positive: '0'" in err


# --- a batch's branches name its tasks ---------------------------------------------------


def test_a_batch_names_each_task_on_its_commit_and_in_its_branch(
    sandbox: Sandbox, repo: Path
) -> None:
    tasks = _tasks(
        sandbox,
        {"id": "fix login", "task": "dsh-example/write login.txt"},
        {"id": "docs/typo#2", "task": "dsh-example/write typo.txt"},
    )
    out = sandbox.root / "results.jsonl"
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, repo))
    assert code == 0, err
    records = {r["id"]: r for r in _records(out)}
    for task_id, slug in (("fix login", "fix-login"), ("docs/typo#2", "docs-typo-2")):
        branch = records[task_id]["changes"]["branch"]
        assert branch.startswith(f"dsh/{slug}-"), branch
        trailer = _git(
            sandbox, repo, "log", "-1", "--format=%(trailers:key=Dsh-Task,valueonly)", branch
        )
        assert trailer == task_id
    assert sorted(_branches(sandbox, repo)) == sorted(
        r["changes"]["branch"] for r in records.values()
    )


def test_an_interrupted_batch_never_names_a_results_file_it_did_not_write(
    sandbox: Sandbox, repo: Path
) -> None:
    tasks = _tasks(sandbox, {"id": "held", "task": f"dsh-contract/1 hold {HELD}"})
    out = sandbox.root / "results.jsonl"
    proc = start_dsh(sandbox, *_batch(sandbox, tasks, out, repo))
    wait_for_file(sandbox.root / HELD, proc)
    os.killpg(proc.pid, signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err
    no_traceback(err)
    assert not out.exists()  # the cancelled run is not recorded; the new file went again
    summary = [line for line in err.splitlines() if line.startswith("dsh: batch: ")]
    assert summary == [
        f"dsh: batch: 0 completed, 0 failed, 1 not recorded; nothing written to {out}"
    ]


# --- one line for what is accepted on the user's behalf ----------------------------------


def test_uninitialised_submodules_are_one_line(sandbox: Sandbox, repo: Path) -> None:
    library = sandbox.root / "library"
    library.mkdir()
    _git(sandbox, library, "init", "--quiet")
    (library / "lib.txt").write_text("lib\n", encoding="utf-8")
    _git(sandbox, library, "add", "--all")
    _git(sandbox, library, "commit", "--quiet", "-m", "lib")
    _git(sandbox, repo, "-c", "protocol.file.allow=always", "submodule", "add", "--quiet",
         str(library), "vendor/library")  # fmt: skip
    _git(sandbox, repo, "commit", "--quiet", "-m", "add a submodule")
    code, stdout, err = run(
        sandbox, "run", str(sandbox.profile), "subagent_example", "dsh-example/write a.txt",
        "--cwd", str(repo), "--worktree",
    )  # fmt: skip
    assert code == 0, err
    assert stdout == "done\n"
    lines = [line for line in err.splitlines() if "submodules" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("dsh_worktree: the worktree ")
    assert lines[0].endswith(
        "leaves the repository's submodules uninitialised (git submodule update --init in it "
        "if the run needs them)"
    )


# --- kill -9 at every git step, then recovery ---------------------------------------------

# The git commands of `dsh run --worktree`, in order, from the first that changes anything.
CREATION = ["worktree list", "worktree add"]
COLLECTION = ["add", "diff --cached", "commit", "rev-parse HEAD", "diff --shortstat",
              "worktree remove"]  # fmt: skip


def _stop_git_at(box: Sandbox, step: str) -> Path:
    """Put :mod:`git_stop` on ``PATH`` as ``git``, stopping at ``step``; its ready file."""
    bin_dir = box.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{GIT_STOP}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    ready = box.root / "git-stopped"
    assert REAL_GIT is not None
    box.env.update(
        PATH=f"{bin_dir}{os.pathsep}{box.env['PATH']}",
        STOPGIT_REAL=REAL_GIT,
        STOPGIT_AT=step,
        STOPGIT_READY=str(ready),
    )
    return ready


def _kill_dsh_at(box: Sandbox, repo: Path, step: str, text: str) -> None:
    ready = _stop_git_at(box, step)
    proc = start_dsh(
        box, "run", str(box.profile), "subagent_example", f"dsh-example/write kept.txt {text}",
        "--cwd", str(repo), "--worktree",
    )  # fmt: skip
    wait_for_file(ready, proc)
    proc.kill()
    proc.communicate(timeout=60)
    # The stopped git goes with dsh's process tree (its guard ends the tree).
    _, alive = psutil.wait_procs(box.survivors(), timeout=60)
    assert alive == [], "a process outlived the killed dsh"
    box.env["STOPGIT_AT"] = ""  # git is itself again from here on


@pytest.mark.parametrize("step", CREATION + COLLECTION)
def test_a_kill_at_every_git_step_is_recovered_with_nothing_lost(
    sandbox: Sandbox, repo: Path, step: str
) -> None:
    text = "written before the kill at " + step
    _kill_dsh_at(sandbox, repo, step, text)

    code, stdout, err = run(sandbox, "worktrees", "recover", str(repo))
    assert code == 0, err
    no_traceback(err)
    assert stdout.splitlines()[-1].startswith("recover: "), stdout
    taken = [line for line in err.splitlines() if line.startswith("dsh_worktree: took over ")]
    if step in ("worktree add", "add", "commit"):  # the killed git held the index (and refs)
        assert any("/index.lock, left by a git command of pid " in line for line in taken), err
        assert all(line.endswith(", which is gone") for line in taken), err
    else:
        assert taken == [], err
    code, stdout, err = run(sandbox, "worktrees", "list", str(repo))
    assert (code, stdout) == (0, f"0 dsh worktree(s) in {repo}\n"), err
    assert _git(sandbox, repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert _git(sandbox, repo, "status", "--porcelain") == ""  # the main tree untouched
    branches = _branches(sandbox, repo)
    if step in CREATION:  # the product never ran: nothing to keep, nothing left
        assert branches == []
        return
    (branch,) = branches  # the product wrote: its work is on its branch, whole
    assert _git(sandbox, repo, "show", f"{branch}:kept.txt") == f"dsh-example/write kept.txt {text}"
    assert _git(sandbox, repo, "show", f"{branch}:readme.txt") == "hello"
    assert _git(sandbox, repo, "rev-list", "--count", f"main..{branch}") == "1"


def test_the_next_run_recovers_a_killed_runs_worktree_in_one_line(
    sandbox: Sandbox, repo: Path
) -> None:
    _kill_dsh_at(sandbox, repo, "add", "written before the kill")
    (left,) = _branches(sandbox, repo)
    code, stdout, err = run(
        sandbox, "run", str(sandbox.profile), "subagent_example", "dsh-example/write next.txt",
        "--cwd", str(repo), "--worktree",
    )  # fmt: skip
    assert code == 0, err
    assert stdout == "done\n"
    recovered = [line for line in err.splitlines() if "recovered" in line]
    assert len(recovered) == 1, err
    assert recovered[0].startswith("dsh_worktree: recovered ")
    assert recovered[0].endswith(
        f", left by a run whose host died: its changes are on branch {left}"
    )
    assert _git(sandbox, repo, "show", f"{left}:kept.txt").startswith("dsh-example/write kept.txt")


# The git commands of `dsh batch --worktree -j 1` (a warm pool of one worktree) from the
# first task's collection to the second task's claim.
POOLED = ["status", "add", "commit", "update-ref --no-deref", "reset --quiet --hard", "clean",
          "switch --quiet --create", "branch -m"]  # fmt: skip


@pytest.mark.parametrize("step", POOLED)
def test_a_kill_at_every_git_step_of_a_pooled_batch_is_recovered_with_nothing_lost(
    sandbox: Sandbox, repo: Path, step: str
) -> None:
    ready = _stop_git_at(sandbox, step)
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": "dsh-example/write a.txt from task a"},
        {"id": "b", "task": "dsh-example/write b.txt from task b"},
    )
    out = sandbox.root / "results.jsonl"
    proc = start_dsh(sandbox, *_batch(sandbox, tasks, out, repo, "-j", "1"))
    wait_for_file(ready, proc)
    proc.kill()
    proc.communicate(timeout=60)
    _, alive = psutil.wait_procs(sandbox.survivors(), timeout=60)
    assert alive == [], "a process outlived the killed dsh"
    sandbox.env["STOPGIT_AT"] = ""

    code, _, err = run(sandbox, "worktrees", "recover", str(repo))
    assert code == 0, err
    no_traceback(err)
    assert _git(sandbox, repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert _git(sandbox, repo, "status", "--porcelain") == ""
    # Task a's product wrote before every one of these steps; b's had not started yet.
    (branch,) = _branches(sandbox, repo)
    assert branch.startswith("dsh/a-"), branch
    assert _git(sandbox, repo, "show", f"{branch}:a.txt") == "dsh-example/write a.txt from task a"
    assert _git(sandbox, repo, "rev-list", "--count", f"main..{branch}") == "1"


def test_resuming_an_isolated_run_without_worktree_is_one_line(
    sandbox: Sandbox, repo: Path
) -> None:
    # The handle of an isolated run names its worktree and branch: continuing it in the
    # main checkout would lose sight of the earlier run's edits.
    token = ContinuationHandle(
        provider="example",
        product="example",
        session="s-1",
        workspace=str(sandbox.root / "wt" / "0123456789ab"),
        branch="dsh/0123456789ab",
    ).dumps()
    code, stdout, err = run(
        sandbox, "run", str(sandbox.profile), "subagent_example", f"dsh-contract/1 hold {HELD}",
        "--cwd", str(repo), "--resume", token,
    )  # fmt: skip
    assert code == 2, err
    assert stdout == ""
    assert err == (
        "dsh: error: --resume: the handle continues an isolated run (its work is on branch "
        "dsh/0123456789ab in a worktree); add --worktree\n"
    )
    assert not (sandbox.root / HELD).exists()
