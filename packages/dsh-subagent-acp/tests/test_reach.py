"""What a confined ACP agent may read: its installation, also when a runtime starts it."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh_subagent_acp.reach import agent_reach


def test_a_node_entry_agent_may_read_its_whole_package_install(tmp_path: Path) -> None:
    prefix = tmp_path / "gemini-cli-0.61.0"
    entry = prefix / "node_modules" / "@google" / "gemini-cli" / "bundle" / "gemini.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("// the agent\n", encoding="utf-8")
    reach = agent_reach(
        ("node", str(entry), "--experimental-acp"), {"HOME": str(tmp_path / "home")}
    )
    assert str(prefix) in reach.read  # its dependencies live beside it, under node_modules
    assert str(entry.parent) in reach.read
    assert reach.pseudo_terminals  # its shell tool runs on node-pty
    assert str(tmp_path / "home" / ".gemini") in reach.write


@pytest.mark.parametrize(
    ("package", "pty"),
    [
        ("@qwen-code/qwen-code/cli.js", True),
        ("@zed-industries/claude-agent-acp/dist/index.js", False),
    ],
)
def test_a_node_entry_agent_is_known_by_its_npm_package(
    tmp_path: Path, package: str, pty: bool
) -> None:
    entry = tmp_path / "install" / "node_modules" / package
    reach = agent_reach(("node", str(entry)), {"HOME": str(tmp_path / "home")})
    assert reach.pseudo_terminals is pty


def test_a_native_agent_does_not_read_its_arguments_as_an_installation(tmp_path: Path) -> None:
    binary = tmp_path / "install" / "bin" / "agent"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    elsewhere = tmp_path / "elsewhere" / "file.js"
    reach = agent_reach((str(binary), str(elsewhere)), {})
    assert not any(path.startswith(str(tmp_path / "elsewhere")) for path in reach.read)
