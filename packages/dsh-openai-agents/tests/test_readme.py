"""The README's complete example runs as written (documentation that can rot)."""

from __future__ import annotations

import pytest
from oai_readme import run_block


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    run_block("Example")
    assert capsys.readouterr().out == "The subagent says 42\n"
