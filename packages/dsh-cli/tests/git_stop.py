#!/usr/bin/env python3
"""A ``git`` that stops dead at one step, for the kill-at-every-git-step tests.

Installed as ``git`` on ``PATH`` ahead of the real one (``STOPGIT_REAL``). Every
command is logged to ``STOPGIT_LOG`` (one line: the arguments after git's ``-c``
options) and run by the real git, except the first whose arguments start with the words
of ``STOPGIT_AT``: that one leaves the state a git killed inside that step
leaves (the lock files the step holds, taken the way git takes them; ``worktree add``
first checks the worktree out, as a kill during its last phase would find it), touches
``STOPGIT_READY`` and waits to be killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

REAL = os.environ["STOPGIT_REAL"]


def _command(argv: list[str]) -> list[str]:
    args = list(argv)
    while len(args) >= 2 and args[0] == "-c":
        args = args[2:]
    return args


def _take(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _dirs() -> tuple[str, str]:
    out = subprocess.run(
        [REAL, "rev-parse", "--absolute-git-dir", "--git-common-dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return out[0], os.path.abspath(out[1])


def _branch_lock(common: str, git_dir: str) -> str:
    with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as handle:
        ref = handle.read().strip().removeprefix("ref: ")
    return os.path.join(common, *ref.split("/")) + ".lock"


def _hold(words: list[str], argv: list[str]) -> None:
    if words == ["worktree", "add"]:
        subprocess.run([REAL, *argv], check=True)
        with open(os.path.join(argv[-2], ".git"), encoding="utf-8") as handle:
            admin = handle.read().strip().removeprefix("gitdir: ")
        _take(os.path.join(admin, "index.lock"))
    elif words[0] in ("add", "commit", "status", "reset", "switch"):
        git_dir, common = _dirs()
        _take(os.path.join(git_dir, "index.lock"))
        if words[0] in ("commit", "reset", "switch"):
            _take(os.path.join(git_dir, "HEAD.lock"))
        if words[0] == "commit":
            _take(_branch_lock(common, git_dir))
    elif words == ["worktree", "remove"]:
        # Git removes the tree file by file: a kill finds some of them gone already.
        for entry in os.scandir(argv[-1]):
            if entry.name != ".git" and entry.is_file():
                os.unlink(entry.path)
    open(os.environ["STOPGIT_READY"], "w").close()
    while True:
        time.sleep(3600)


def main() -> None:
    argv = sys.argv[1:]
    args = _command(argv)
    log = os.environ.get("STOPGIT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(" ".join(args) + "\n")
    stop = os.environ.get("STOPGIT_AT", "").split()
    ready = os.environ.get("STOPGIT_READY", "")
    if stop and args[: len(stop)] == stop and ready and not os.path.exists(ready):
        _hold(stop, argv)
    os.execv(REAL, [REAL, *argv])


if __name__ == "__main__":
    main()
