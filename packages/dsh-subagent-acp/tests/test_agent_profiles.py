"""The shipped ACP agent profiles: data, pins, entry lookup and the configs they build."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dsh_subagent_acp import AgentProfile, agent_profile, known_agents

ROOT = Path(__file__).resolve().parents[3]
INSTALLER = ROOT / "scripts" / "install-acp-agent"
NAMES = ["claude-agent-acp", "codex-acp", "copilot", "gemini-cli", "opencode", "qwen-code"]


def _installer_table() -> dict[str, tuple[str, str, str]]:
    """``agent -> (package, version, entry glob)`` as scripts/install-acp-agent has them."""
    text = INSTALLER.read_text(encoding="utf-8")
    rows = re.findall(
        r'^  ([a-z-]+)\)\n(?:\s*#.*\n)*\s*PACKAGE="([^"]+)"; VERSION="([^"]+)"\n'
        r'(?:\s*#.*\n)*\s*ENTRY_GLOB="([^"]+)"',
        text,
        flags=re.MULTILINE,
    )
    return {name: (package, version, entry) for name, package, version, entry in rows}


def test_every_known_agent_ships_a_profile() -> None:
    assert [profile.name for profile in known_agents()] == NAMES


def test_the_installer_pins_exactly_what_the_profiles_say() -> None:
    table = _installer_table()
    assert sorted(table) == NAMES
    for profile in known_agents():
        package, version, entry = table[profile.name]
        assert (package, version) == (profile.package, profile.version), profile.name
        # The installer globs the platform package of codex-acp; the profile names x64.
        assert re.fullmatch(entry.replace("*", ".*"), profile.entry), profile.name


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'nope'.*known: claude-agent-acp, codex-acp"):
        agent_profile("nope")


def _install(prefix: Path, profile: AgentProfile, version: str) -> Path:
    manifest = prefix / "node_modules" / profile.package / "package.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"name": profile.package, "version": version}))
    entry = prefix / profile.entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text("")
    return entry


def test_entry_in_finds_only_the_pinned_version(tmp_path: Path) -> None:
    profile = agent_profile("gemini-cli")
    assert profile.entry_in(tmp_path) is None  # nothing installed
    entry = _install(tmp_path / "pinned", profile, profile.version)
    assert profile.entry_in(tmp_path / "pinned") == entry
    _install(tmp_path / "other", profile, "0.0.1")
    assert profile.entry_in(tmp_path / "other") is None
    (tmp_path / "broken" / "node_modules" / profile.package).mkdir(parents=True)
    (tmp_path / "broken" / "node_modules" / profile.package / "package.json").write_text("[")
    assert profile.entry_in(tmp_path / "broken") is None


def test_node_agents_run_under_node_and_native_ones_directly() -> None:
    assert agent_profile("gemini-cli").command("/p/gemini.js") == (
        "node",
        ("/p/gemini.js", "--acp", "--model", "gemini-2.5-pro"),
    )
    assert agent_profile("opencode").command("/p/opencode") == ("/p/opencode", ("acp",))


def test_every_keyless_template_fills_in(tmp_path: Path) -> None:
    for profile in known_agents():
        env = profile.keyless_env("http://127.0.0.1:9/v1", "sk-test", "m-1")
        assert all("$" not in value for value in env.values()), profile.name
    opencode = agent_profile("opencode").keyless_env("http://127.0.0.1:9/v1", "sk-test", "m-1")
    config = json.loads(opencode["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["fixture"]["options"]["baseURL"] == "http://127.0.0.1:9/v1"
    assert config["model"] == "fixture/m-1"
    assert opencode["FIXTURE_OPENAI_API_KEY"] == "sk-test"


def test_config_layers_the_profile_env_then_root_env_then_the_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = agent_profile("claude-agent-acp")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    as_user = profile.config("/p/index.js", env={"DISABLE_TELEMETRY": "0", "X": "1"})
    assert (as_user.provider_name, as_user.command) == ("claude-agent-acp", "node")
    assert as_user.args == ("/p/index.js",)
    assert as_user.env["DISABLE_TELEMETRY"] == "0"
    assert as_user.env["X"] == "1"
    assert "IS_SANDBOX" not in as_user.env
    monkeypatch.setattr("os.geteuid", lambda: 0)
    as_root = profile.config("/p/index.js", provider_name="claude", dispose_grace=1.0)
    assert as_root.env["IS_SANDBOX"] == "1"
    assert (as_root.provider_name, as_root.dispose_grace) == ("claude", 1.0)


def test_the_readme_profile_example_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Tested agent profiles", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})  # its assert is the check


def test_the_docs_loader_row_is_the_profile() -> None:
    """docs/agents.md's Loader example runs Gemini CLI exactly as its profile says."""
    import tomllib

    page = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    block = page.split("```toml\n", 1)[1].split("```", 1)[0]
    (row,) = tomllib.loads(block)["providers"]
    profile = agent_profile(row["provider_name"])
    entry = "/opt/acp/" + profile.entry
    assert (row["config"]["command"], tuple(row["config"]["args"])) == profile.command(entry)
    assert profile.env.items() <= row["config"]["env"].items()
    assert row["pass_env"] == list(profile.credential_env)
