"""The README's harness example runs as written (it is documentation that can rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_harness_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Starting, collecting and disposing a run", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    exec(compile(match.group(1), str(README), "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "done\n"


def test_one_call_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## One delegation in one call", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    exec(compile(match.group(1), str(README), "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "completed done\n"
