"""The README's example runs as written, against the REAL Codex (keyless) and real git."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dsh_contract_tests.fixtures import responses
from dsh_worktree.testing import git_out

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.keyless
def test_the_example_isolates_a_real_codex_run(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert match is not None
    with responses.ResponsesFixture() as model:
        model.enqueue(responses.PlainAnswer("typed", "final_answer"))
        env = responses.codex_keyless_env(tmp_path / "codex")
        responses.write_codex_config(env["CODEX_HOME"], model.base_url)
        code = match.group(1).replace("CodexConfig()", f"CodexConfig(env={json.dumps(env)})")
        code = code.replace('"/path/to/repo"', json.dumps(str(repo)))
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out
    assert printed.startswith("completed branch='dsh/")
    assert "commit=None" in printed  # the model only answered: nothing to commit
    assert git_out(repo, "branch", "--format=%(refname:short)") == "main"


@pytest.mark.keyless
def test_the_warm_pool_example_reuses_prepared_worktrees_with_a_real_codex(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 2
    with responses.ResponsesFixture() as model:
        model.enqueue(responses.PlainAnswer("typed", "final_answer"))
        model.enqueue(responses.PlainAnswer("typed too", "final_answer"))
        env = responses.codex_keyless_env(tmp_path / "codex")
        responses.write_codex_config(env["CODEX_HOME"], model.base_url)
        code = blocks[1].replace("CodexConfig()", f"CodexConfig(env={json.dumps(env)})")
        code = code.replace('"/path/to/repo"', json.dumps(str(repo)))
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
        bodies = [json.dumps(request.body) for request in model.requests]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2
    assert all(line.startswith("completed branch='dsh/") for line in printed)
    assert all("commit=None" in line for line in printed)
    # Both runs worked in worktrees prepared by prewarm(): the two of the pool.
    cache = str(tmp_path / "home" / ".cache" / "dsh" / "worktrees")
    used = {m for body in bodies for m in re.findall(re.escape(cache) + r"/[^/\"<]+/\w{12}", body)}
    assert len(used) == 2
    assert git_out(repo, "branch", "--format=%(refname:short)") == "main"
    assert git_out(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
