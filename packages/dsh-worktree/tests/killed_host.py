"""A host process for the SIGKILL test: one isolated run that writes a file, then holds.

argv: REPO READY_FILE. Writes the worktree's path to READY_FILE once the run has written
its file, then waits to be killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from dsh_worktree import Worktree
from worktree_doubles import EditingProvider


async def main(repo: str, ready: str) -> None:
    from dsh_subagent import delegate

    def edit(cwd: Path) -> None:
        (cwd / "written-before-the-kill.txt").write_text("partial work\n", encoding="utf-8")
        Path(ready).write_text(str(cwd), encoding="utf-8")

    await delegate(EditingProvider(edit, hold=True), "edit", cwd=repo, isolation=Worktree())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
