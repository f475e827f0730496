"""The README's example runs as written (documentation that can rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_batch_runs_and_returns_the_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = README.read_text(encoding="utf-8").split("## A batch from Python\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert match is not None
    namespace: dict[str, object] = {"__name__": "batch_readme_example"}
    exec(compile(match.group(1), str(README), "exec"), namespace)
    assert capsys.readouterr().out == (
        "[('one', 'completed', 'done'), ('two', 'completed', 'done')]\n['one', 'two']\n"
    )
    results = namespace["work"]
    assert isinstance(results, Path)
    assert len((results / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 2
