"""Claude Code's environment for an Anthropic-compatible endpoint (DeepSeek's included).

The real CLI against a loopback stand-in of DeepSeek's endpoint, through this overlay, is
e2e/test_credentialed_deepseek.py::test_claude_code_path_against_the_stand_in.
"""

from __future__ import annotations

from pathlib import Path

from dsh_subagent_claude_code import (
    DEEPSEEK_ANTHROPIC_BASE_URL,
    ClaudeCodeConfig,
    anthropic_endpoint_env,
    deepseek_env,
)


def test_the_key_is_only_the_bearer_token_and_an_inherited_api_key_is_removed(
    tmp_path: Path,
) -> None:
    env = anthropic_endpoint_env(
        "sk-secret", tmp_path / "claude", base_url="http://127.0.0.1:9/x", model="m", fast_model="f"
    )
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-secret"
    assert "ANTHROPIC_API_KEY" in env
    assert env["ANTHROPIC_API_KEY"] is None  # removes the host's key, never competes with it
    assert [name for name, value in env.items() if value == "sk-secret"] == ["ANTHROPIC_AUTH_TOKEN"]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/x"
    assert "CLAUDE_CODE_EFFORT_LEVEL" not in env
    # Nothing is written: the isolated home is made of empty directories.
    assert [p for p in (tmp_path / "claude").rglob("*") if not p.is_dir()] == []
    ClaudeCodeConfig(env=env)  # a valid provider overlay


def test_the_home_is_isolated_under_the_given_directory(tmp_path: Path) -> None:
    base = tmp_path / "claude"
    env = anthropic_endpoint_env("k", base, base_url="u", model="m", fast_model="f")
    for name, folder in {
        "HOME": "home",
        "CLAUDE_CONFIG_DIR": "claude-config",
        "TMPDIR": "tmp",
    }.items():
        assert env[name] == str(base / folder)
        assert (base / folder).is_dir()
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        value = env[name]
        assert value is not None
        assert Path(value).parent == base / "xdg"
    for name in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_AUTOUPDATER",
    ):
        assert env[name] == "1"
    again = anthropic_endpoint_env("k", base, base_url="u", model="m", fast_model="f")
    assert again == env  # an existing home is reused


def test_deepseek_uses_its_documented_models_and_endpoint(tmp_path: Path) -> None:
    env = deepseek_env("sk-deepseek", tmp_path)
    assert env["ANTHROPIC_BASE_URL"] == DEEPSEEK_ANTHROPIC_BASE_URL
    assert DEEPSEEK_ANTHROPIC_BASE_URL == "https://api.deepseek.com/anthropic"
    models = {name: env[name] for name in env if name.endswith("_MODEL")}
    assert models == {
        "ANTHROPIC_MODEL": "deepseek-v4-pro[1m]",
        "ANTHROPIC_DEFAULT_OPUS_MODEL": "deepseek-v4-pro[1m]",
        "ANTHROPIC_DEFAULT_SONNET_MODEL": "deepseek-v4-pro[1m]",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "deepseek-v4-flash",
        "CLAUDE_CODE_SUBAGENT_MODEL": "deepseek-v4-flash",
    }
    assert env["CLAUDE_CODE_EFFORT_LEVEL"] == "max"
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-deepseek"
    local = deepseek_env("sk-deepseek", tmp_path, base_url="http://127.0.0.1:9/anthropic")
    assert local["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/anthropic"


def test_the_readme_endpoint_example_runs() -> None:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## An Anthropic-compatible endpoint", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "README.md", "exec"), {})  # its assert is the check
