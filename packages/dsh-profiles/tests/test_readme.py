"""The README's Python examples run as written: loading the repository's Codex profile
(nothing starts) and a delegation through the bound tools, with the example provider
standing in for Codex behind the same tool name (a real child process, no product)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dsh_subprocess.testing import ProcessWatch

ROOT = Path(__file__).resolve().parents[3]
README = Path(__file__).resolve().parent.parent / "README.md"


def _python_block(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, heading
    return str(blocks[0])


def _run(code: str) -> None:
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})


def test_loading_the_codex_profile_prints_its_tools_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)  # the example names the repository's examples/codex.toml
    watch = ProcessWatch()
    _run(_python_block("Load a profile"))
    assert capsys.readouterr().out.splitlines() == [
        "('subagent_codex_primary', 'subagent_codex_secondary', 'subagent_codex', "
        "'job_output', 'job_list', 'job_kill')",
        "codex",
    ]
    assert watch.alive() == []


def test_a_bad_profile_prints_the_row_and_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "codex.toml").write_text(
        '[[providers]]\ntype = "codex"\n[providers.config]\npermission_mode = "sometimes"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    _run(_python_block("Load a profile"))
    printed = capsys.readouterr().out
    assert printed.startswith("examples/codex.toml: providers row 1 ('codex') field ")
    assert "'config.permission_mode'" in printed


def test_the_delegation_example_answers_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "codex.toml").write_text(
        '[[providers]]\ntype = "example"\n\n'
        '[[tools]]\nname = "subagent_codex"\nprovider = "example"\n\n[jobs]\n',
        encoding="utf-8",
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    code = _python_block("Delegate through the tools")
    assert '"/path/to/workspace"' in code
    watch = ProcessWatch()
    _run(code.replace('"/path/to/workspace"', repr(str(workspace))))
    printed = capsys.readouterr().out.splitlines()
    assert "'name': 'subagent_codex'" in printed[0]  # the schemas handed to the model
    assert printed[-1] == "done"  # the example child's answer to a task without directives
    assert watch.alive() == []


def test_the_run_task_example_answers_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "codex.toml").write_text(
        '[[providers]]\ntype = "example"\n\n'
        '[[tools]]\nname = "subagent_codex"\nprovider = "example"\n\n[jobs]\n',
        encoding="utf-8",
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    code = _python_block("Run one task like `dsh run`")
    assert '"/path/to/workspace"' in code
    watch = ProcessWatch()
    _run(code.replace('"/path/to/workspace"', repr(str(workspace))))
    # the example child's answer to a task without directives; the status's last word
    assert capsys.readouterr().out.splitlines() == ["completed done", "completed 0"]
    assert watch.alive() == []
