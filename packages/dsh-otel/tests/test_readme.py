"""The README's example runs as written (documentation that can rot)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    body = text.split("## Turn it on in your harness\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert match is not None
    namespace: dict[str, object] = {"__name__": "otel_readme_example"}
    exec(compile(match.group(1), str(README), "exec"), namespace)
    assert namespace["result"] is not None
    spans = namespace["spans"]
    assert isinstance(spans, dict)
    assert "invoke_agent helper" in spans
