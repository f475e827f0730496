"""The toolset built from a profile honours each tool row's own worktree isolation.

Real git; the provider is a scripted double that writes ``edited.txt`` into its run's cwd
(the real products editing through their own tools are the e2e worktree tier's). Two tool
rows bind one provider row: ``iso`` sets ``[tools.worktree]``, ``plain`` does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh_profiles import StaticDiscovery, load_profile, open_runtime
from dsh_pydantic_ai import SubagentToolset
from dsh_subagent import ParentContext
from dsh_worktree.testing import EditingProvider, private_git_env, scratch_repository
from dsh_worktree.testing import git_out as git
from pai_model import Steps, call
from pydantic_ai import Agent

pytestmark = pytest.mark.anyio


PROFILE = """
[[providers]]
type = "editing"
provider_name = "worker"

[[tools]]
name = "plain"
provider = "worker"
background_mode = "disabled"

[[tools]]
name = "iso"
provider = "worker"
background_mode = "disabled"
[tools.worktree]
branch = "iso/{id}"
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in private_git_env(tmp_path / "home").items():
        monkeypatch.setenv(name, value)
    root = scratch_repository(tmp_path / "repo")
    return root


async def test_only_the_isolated_tool_row_works_on_a_branch(repo: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    composition = load_profile(profile, discovery=StaticDiscovery({"editing": [EditingProvider]}))
    steps = Steps(
        [call("iso", description="iso", prompt="via iso")],
        [call("plain", description="plain", prompt="via plain")],
    )
    lead = ParentContext(session_id="pydantic-ai-lead", cwd=str(repo))
    async with open_runtime(composition) as runtime:
        toolset = SubagentToolset(runtime.tools.values())
        result = await Agent(steps.model(), toolsets=[toolset]).run("Go.", deps=lead)
    (branch,) = [b for b in git(repo, "branch", "--format=%(refname:short)").split() if b != "main"]
    assert branch.startswith("iso/")
    assert result.output.startswith(f"done\nChanges: committed on branch {branch} (1 files")
    assert result.output.endswith("\ndone")  # plain: no Changes line
    assert git(repo, "show", f"{branch}:edited.txt") == "via iso"
    assert (repo / "edited.txt").read_text(encoding="utf-8") == "via plain\n"  # in place
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
