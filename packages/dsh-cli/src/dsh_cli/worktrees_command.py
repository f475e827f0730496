"""``dsh worktrees list|recover|prune REPO``: the worktrees dsh-worktree left in a repository.

``list`` shows every worktree dsh-worktree holds locked, with its owner's state (``live``:
its host process runs; ``abandoned``: the host died mid-run; ``foreign``: another
machine's). ``recover`` commits what each abandoned worktree holds onto its branch and
removes it (what every isolated run also does first). ``prune`` recovers, then lets git
forget worktrees whose directories are gone. Exit status: 0 done, 1 recovery failed for
a worktree (it stays for the next attempt), 2 REPO is not in a non-bare repository.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

import anyio
from dsh_profiles.errors import UsageError
from dsh_worktree import (
    Recovered,
    WorktreeError,
    list_worktrees,
    open_repository,
    prune,
    recover,
)

__all__ = ["add_worktrees_parser", "cmd_worktrees"]


def add_worktrees_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dsh worktrees``."""
    parser = sub.add_parser(
        "worktrees",
        parents=[common],
        help="list, recover or prune the git worktrees isolated runs left in a repository",
        description="Worktrees of isolated runs (--worktree) whose host died mid-run: "
        "list them, commit what they hold onto their branches and remove them (recover), "
        "or recover and let git forget vanished ones (prune).",
        epilog="exit status: 0 done, 1 a worktree could not be recovered (it stays), "
        "2 REPO is not inside a non-bare git repository",
    )
    parser.add_argument("action", choices=("list", "recover", "prune"))
    parser.add_argument("repo", metavar="REPO", help="a directory inside the repository")


def _line(item: Recovered) -> str:
    branch = item.branch or "(detached)"
    if item.action == "committed":
        assert item.commit is not None
        return f"committed {item.path} on {branch} at {item.commit[:12]}; removed"
    return {
        "empty": f"removed {item.path} (no changes; branch {branch} deleted)",
        "discarded": f"discarded {item.path} (it was still being created)",
        "pruned": f"pruned {item.path} (its directory was gone)",
        "busy": f"left {item.path}: a live process still works in it",
    }[item.action]


async def _main(action: str, path: str, out: TextIO) -> int:
    try:
        repo = await open_repository(path)
    except WorktreeError as exc:
        raise UsageError(exc.message) from None
    if action == "list":
        items = await list_worktrees(repo)
        for owned in items:
            gone = " (directory gone)" if owned.missing else ""
            print(
                f"{owned.state:9}  {owned.branch or '(detached)'}  {owned.path}{gone}  "
                f"pid {owned.owner.pid} on {owned.owner.host}",
                file=out,
            )
        print(f"{len(items)} dsh worktree(s) in {repo.toplevel}", file=out)
        return 0
    done = await (recover(repo) if action == "recover" else prune(repo))
    for item in done:
        print(_line(item), file=out)
    print(f"{action}: {len(done)} abandoned worktree(s) handled in {repo.toplevel}", file=out)
    return 0


def cmd_worktrees(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``dsh worktrees``."""
    try:
        return anyio.run(_main, args.action, os.path.abspath(args.repo), out)
    except UsageError:
        raise
    except WorktreeError as exc:
        print(f"dsh: worktrees: {exc.message}", file=err)
        return 1
