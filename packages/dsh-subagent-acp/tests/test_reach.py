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


def test_opencode_may_connect_to_the_endpoint_its_inline_config_names(tmp_path: Path) -> None:
    # OpenCode names a custom provider's endpoint in its JSON config, not in a
    # `*_BASE_URL` variable: without this port every confined prompt ended "Cannot
    # connect to API" before a single model request.
    from dsh_subagent import effective_policy
    from dsh_subagent_acp import AcpProvider, agent_profile

    profile = agent_profile("opencode")
    binary = tmp_path / "install" / profile.entry
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    keyless = profile.keyless_env("http://127.0.0.1:48213/v1", "sk-test")
    config = profile.config(binary, env={"HOME": str(tmp_path / "home"), **keyless})
    found = effective_policy(AcpProvider(config), str(tmp_path))
    assert found is not None
    policy = found[1]
    assert policy is not None
    (served,) = policy.bind_ports
    assert set(policy.connect_ports) == {48213, served}  # the endpoint replaces 443


def test_opencode_ports_come_from_its_config_file_too(tmp_path: Path) -> None:
    config = tmp_path / "opencode.json"
    config.write_text(
        '{"provider": {"a": {"options": {"baseURL": "https://models.example:8443/v1"}},'
        ' "b": {"options": {"baseURL": "http://127.0.0.1/v1"}}}}',
        encoding="utf-8",
    )
    reach = agent_reach(
        (str(tmp_path / "install" / "opencode"), "acp"),
        {"OPENCODE_CONFIG": str(config), "OPENCODE_CONFIG_CONTENT": "not json"},
    )
    assert reach.connect_ports == (80, 8443)
    assert str(config) in reach.read  # the file itself, nothing beside it
    assert str(tmp_path) not in reach.read


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OPENCODE_CONFIG_CONTENT": '{"model": "anthropic/claude"}'},
        {"OPENCODE_CONFIG": "/nonexistent/opencode.json"},
    ],
)
def test_opencode_without_an_endpoint_reaches_https(env: dict[str, str | None]) -> None:
    assert agent_reach(("/opt/opencode", "acp"), env).connect_ports == (443,)


def test_only_opencode_reads_opencode_config() -> None:
    env: dict[str, str | None] = {
        "OPENCODE_CONFIG_CONTENT": '{"provider": {"a": {"options": {"baseURL": "http://h:9/"}}}}'
    }
    assert agent_reach(("/opt/other-agent",), env).connect_ports == (443,)
