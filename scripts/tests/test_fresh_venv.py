"""The fresh-venv helpers find what they look for, and catch an editable install."""

from __future__ import annotations

import sys
from pathlib import Path

from fresh_venv import KIT_README, install_problems, readme_commands


def test_readme_commands_are_the_marked_block_dedented() -> None:
    text = "intro\n  <!-- ci: demo -->\n  ```bash\n  echo one\n    echo two\n  ```\nmore\n"
    assert readme_commands(text, "demo") == "echo one\n  echo two\n"


def test_the_kit_readme_carries_both_marked_blocks() -> None:
    text = KIT_README.read_text(encoding="utf-8")
    assert "uv build" in readme_commands(text, "build-kit-wheels")
    assert "pytest" in readme_commands(text, "install-and-run")
    assert "dsh_contract_tests new" in readme_commands(text, "scaffold")


def test_an_editable_workspace_install_is_reported() -> None:
    # This test venv is the uv workspace: its dsh distributions are editable installs.
    problems = install_problems(Path(sys.executable), {"dsh-subagent"})
    assert any(p.startswith("dsh-subagent is installed from a directory") for p in problems)


def test_a_missing_distribution_is_reported() -> None:
    problems = install_problems(Path(sys.executable), {"dsh-no-such-distribution"})
    assert "dsh-no-such-distribution is not installed" in problems
