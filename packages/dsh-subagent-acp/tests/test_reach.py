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


def test_an_agent_serving_itself_gets_a_port_of_its_own_to_bind_and_connect(
    tmp_path: Path,
) -> None:
    # OpenCode's `opencode acp` serves its agent on a loopback port and connects to it:
    # under the port rules any other port refused its bind (ServeError at start).
    from dsh_subagent import effective_policy
    from dsh_subagent_acp import AcpConfig, AcpProvider

    provider = AcpProvider(AcpConfig(command="/bin/true", args=("acp",), serve_port_arg="--port"))
    first, second = provider.launch(str(tmp_path)), provider.launch(str(tmp_path))
    assert first.argv[:3] == ("/bin/true", "acp", "--port")
    port = int(first.argv[3])
    assert 0 < port < 65536
    assert second.argv[2] == "--port"  # a free port per run, picked at each launch
    found = effective_policy(provider, str(tmp_path))
    assert found is not None
    _, policy = found
    assert policy is not None
    served = policy.bind_ports
    assert len(served) == 1
    assert served[0] in policy.connect_ports
    plain = effective_policy(AcpProvider(AcpConfig(command="/bin/true")), str(tmp_path))
    assert plain is not None
    assert plain[1] is not None
    assert plain[1].bind_ports == ()


def test_the_opencode_profile_serves_on_a_port_dsh_picks() -> None:
    from dsh_subagent_acp.agents import agent_profile

    assert agent_profile("opencode").serve_port_arg == "--port"
    assert agent_profile("codex-acp").serve_port_arg is None
