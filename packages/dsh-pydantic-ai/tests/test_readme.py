"""The README's complete example runs as written (documentation that can rot)."""

from __future__ import annotations

import importlib.metadata
import tomllib

import pytest
from pai_readme import README, run_block


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    run_block("Example")
    assert capsys.readouterr().out == "The subagent says 42\n"


def test_the_readme_names_the_pinned_framework_version() -> None:
    """A framework bump must also update the README (and pass this suite)."""
    pin = f"pydantic-ai-slim=={importlib.metadata.version('pydantic-ai-slim')}"
    assert pin in README.read_text(encoding="utf-8")
    pyproject = tomllib.loads((README.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert pin in pyproject["project"]["dependencies"]
