"""A host process for the SIGKILL test: one isolated run that writes a file, then holds.

argv: REPO READY_FILE [WARM]. Writes the worktree's path to READY_FILE once the run has
written its file, then waits to be killed. With WARM, the run claims a worktree from a
warm pool of that size, filled first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from dsh_worktree import Worktree
from worktree_doubles import EditingProvider


async def main(repo: str, ready: str, warm: int) -> None:
    from dsh_subagent import delegate

    def edit(cwd: Path) -> None:
        (cwd / "written-before-the-kill.txt").write_text("partial work\n", encoding="utf-8")
        staged = Path(ready + ".tmp")  # renamed: the test never reads a half-written file
        staged.write_text(str(cwd), encoding="utf-8")
        staged.rename(ready)

    inner = EditingProvider(edit, hold=True)
    if not warm:
        await delegate(inner, "edit", cwd=repo, isolation=Worktree())
        return
    async with Worktree(warm=warm).isolate(inner) as provider:
        await provider.prewarm(repo)
        await delegate(provider, "edit", cwd=repo)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
