"""A Loader profile declares ACP instances and tool rows; composing starts nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from dsh_profiles.errors import ProfileError
from dsh_profiles.loader import compose
from dsh_profiles.profile import parse_profile
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subprocess.testing import ProcessWatch

PROFILE = """
[[providers]]
type = "acp"
provider_name = "codex-acp"
[providers.config]
command = "/opt/acp/codex-acp"
env = { CODEX_HOME = "/srv/codex-home", RUST_LOG = "warn" }
dispose_eof_grace = 0.5

[[providers]]
type = "acp"
provider_name = "claude-acp"
[providers.config]
command = "node"
args = ["/opt/acp/claude-agent-acp/dist/index.js"]
permission = "allow"

[[tools]]
name = "subagent_codex_acp"
provider = "codex-acp"
background_mode = "disabled"

[[tools]]
name = "subagent_claude_acp"
provider = "claude-acp"
background_mode = "disabled"
"""


def test_profile_declares_two_acp_instances_and_their_tools() -> None:
    watch = ProcessWatch()
    composition = compose(parse_profile(tomllib.loads(PROFILE)))
    providers = {loaded.name: loaded.provider for loaded in composition.providers}
    assert set(providers) == {"codex-acp", "claude-acp"}
    assert all(isinstance(p, AcpProvider) for p in providers.values())
    codex = providers["codex-acp"]
    assert isinstance(codex, AcpProvider)
    assert codex.config == AcpConfig(
        provider_name="codex-acp",
        command="/opt/acp/codex-acp",
        env={"CODEX_HOME": "/srv/codex-home", "RUST_LOG": "warn"},
        dispose_eof_grace=0.5,
    )
    claude = providers["claude-acp"]
    assert isinstance(claude, AcpProvider)
    assert claude.config.permission == "allow"
    assert [t.provider for t in composition.tools] == ["codex-acp", "claude-acp"]
    assert watch.alive() == []


def test_invalid_acp_config_is_a_profile_error_naming_the_field(tmp_path: Path) -> None:
    bad = PROFILE.replace('permission = "allow"', 'permission = "ask"').replace(
        "dispose_eof_grace = 0.5", "dispose_eof_grace = -1"
    )
    with pytest.raises(ProfileError) as caught:
        compose(parse_profile(tomllib.loads(bad)))
    text = str(caught.value)
    assert "permission" in text
    assert "dispose_eof_grace" in text


def test_the_readme_profile_composes_with_shell_snapshots_off() -> None:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8")
    block = text.split("### codex-acp", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    composition = compose(parse_profile(tomllib.loads(block)))
    (loaded,) = composition.providers
    assert isinstance(loaded.provider, AcpProvider)
    assert loaded.provider.config.args == ("-c", "features.shell_snapshot=false")
    assert loaded.provider.config.dispose_eof_grace == 0.5
