"""Where the known ACP agents are installed (:mod:`dsh_subagent_acp.installed`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsh_subagent_acp import (
    AGENTS_DIR_VARIABLE,
    agent_profile,
    default_prefixes,
    installed_agents,
    installer_dir,
    known_agents,
)


def _install(prefix: Path, name: str, version: str | None = None) -> Path:
    """A fake npm install of profile ``name`` (its pinned version unless given)."""
    profile = agent_profile(name)
    manifest = prefix / "node_modules" / profile.package / "package.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"version": version or profile.version}), encoding="utf-8")
    entry = prefix / profile.entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text("", encoding="utf-8")
    return entry


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME with neither XDG_DATA_HOME nor DSH_ACP_AGENTS_DIR set."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv(AGENTS_DIR_VARIABLE, raising=False)
    return home


def test_each_profile_gets_the_first_prefix_holding_its_pinned_version(tmp_path: Path) -> None:
    npm = tmp_path / "npm"
    gemini = _install(npm, "gemini-cli")
    _install(npm, "opencode", version="0.0.1")  # not the pinned version
    cache = tmp_path / "cache"  # the <agent>-<version> layout of scripts/install-acp-agent
    qwen = _install(cache / f"qwen-code-{agent_profile('qwen-code').version}", "qwen-code")
    later = _install(tmp_path / "later", "gemini-cli")
    found = {a.profile.name: a.entry for a in installed_agents([npm, cache, tmp_path / "later"])}
    assert list(found) == [profile.name for profile in known_agents()]
    assert found["gemini-cli"] == gemini != later
    assert found["qwen-code"] == qwen
    assert found["opencode"] is None
    assert installed_agents([tmp_path / "missing"])[0].entry is None  # no directory: nothing


def test_the_installer_dir_follows_the_install_scripts_rule(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert installer_dir() is None  # ~/.local/share/dsh/acp-agents does not exist yet
    per_user = home / ".local" / "share" / "dsh" / "acp-agents"
    per_user.mkdir(parents=True)
    assert installer_dir() == per_user
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")  # ignored, as XDG says
    assert installer_dir() == per_user
    data = tmp_path / "data"
    (data / "dsh" / "acp-agents").mkdir(parents=True)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    assert installer_dir() == data / "dsh" / "acp-agents"
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    monkeypatch.setenv(AGENTS_DIR_VARIABLE, str(chosen))
    assert installer_dir() == chosen
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.delenv(AGENTS_DIR_VARIABLE)
    assert installer_dir() is None


def test_a_dsh_acp_agents_dir_that_is_not_a_directory_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "missing")
    monkeypatch.setenv(AGENTS_DIR_VARIABLE, missing)
    with pytest.raises(ValueError, match="is not a directory") as raised:
        installed_agents()
    assert str(raised.value) == f"{AGENTS_DIR_VARIABLE} {missing!r} is not a directory"


def test_default_prefixes_are_the_installer_dir_the_cwd_then_nodes_prefix(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen"
    entry = _install(chosen / f"codex-acp-{agent_profile('codex-acp').version}", "codex-acp")
    monkeypatch.setenv(AGENTS_DIR_VARIABLE, str(chosen))
    node_bin = tmp_path / "node" / "bin"
    node_bin.mkdir(parents=True)
    (node_bin / "node").write_text("#!/bin/sh\n", encoding="utf-8")
    (node_bin / "node").chmod(0o755)
    (tmp_path / "node" / "lib").mkdir()
    monkeypatch.setenv("PATH", str(node_bin))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert default_prefixes() == [chosen, work, (tmp_path / "node" / "lib").resolve()]
    found = {agent.profile.name: agent.entry for agent in installed_agents()}
    assert found["codex-acp"] == entry


def test_the_readme_installed_agents_example_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Tested agent profiles", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python\n")[2].split("```", 1)[0]
    assert "installed_agents" in block
    exec(compile(block, "README.md", "exec"), {})  # its assert is the check
