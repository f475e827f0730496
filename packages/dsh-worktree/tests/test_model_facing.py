"""What a model sees of an isolated run: the answer, then one line naming branch and counts."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dsh_subagent import CancelController, ParentContext, SubagentService
from dsh_subagent.tool import SubagentTool, SubagentToolConfig, ToolCallContext, run_tool_call
from dsh_tool_jobs import JobRegistry
from dsh_tool_jobs.background import BackgroundSubagentLauncher
from dsh_tool_jobs.tools import job_tools
from dsh_worktree import Worktree
from dsh_worktree.testing import git_out
from worktree_doubles import EditingProvider

pytestmark = pytest.mark.anyio


def _edit(cwd: Path) -> None:
    (cwd / "shared.txt").write_text("one\ntwo\n", encoding="utf-8")


async def test_the_tool_text_and_the_job_output_end_with_the_changes_line(repo: Path) -> None:
    parent = ParentContext(session_id="model", cwd=str(repo))

    def context() -> ToolCallContext:
        return ToolCallContext(parent=parent, cancel=CancelController().signal)

    async with SubagentService() as service:
        service.register_provider(Worktree().isolate(EditingProvider(_edit)))
        async with JobRegistry() as registry:
            config = SubagentToolConfig(provider="editor", max_depth="provider-managed")
            tool = SubagentTool(service, config, BackgroundSubagentLauncher(registry, service))
            foreground = await run_tool_call(tool, {"description": "d", "prompt": "p"}, context())
            started = await run_tool_call(
                tool, {"description": "d", "prompt": "p", "run_in_background": True}, context()
            )
            job_id = started.text.rsplit(" ", 1)[-1]
            with anyio.fail_after(60):
                snapshot = registry.get(job_id, parent)
                while not snapshot.terminal:
                    snapshot = await registry.wait(job_id, 60_000.0, parent)
            tools = {t.name: t for t in job_tools(registry)}
            collected = await run_tool_call(tools["job_output"], {"job_id": job_id}, context())

    branches = sorted(b for b in git_out(repo, "branch", "--format=%(refname:short)").split())
    assert len(branches) == 3  # main and one branch per run
    answer, line = foreground.text.split("\n")
    assert answer == "done"
    assert line.startswith("Changes: committed on branch dsh/")
    assert line.endswith(
        "(1 files changed, 2 insertions(+), 1 deletions(-)), commit "
        + git_out(repo, "rev-parse", line.split()[4])[:12]
    )
    assert "\nChanges: committed on branch dsh/" in collected.text
