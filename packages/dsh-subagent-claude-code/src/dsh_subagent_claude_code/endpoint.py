"""Claude Code pointed at an Anthropic-compatible endpoint: the environment overlay.

Claude Code reads its endpoint, its credential and the models it uses from documented
variables (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_MODEL``, the
``ANTHROPIC_DEFAULT_*_MODEL`` family, ``CLAUDE_CODE_SUBAGENT_MODEL``).
:func:`anthropic_endpoint_env` builds that overlay for ``ClaudeCodeConfig.env`` with an
isolated home; :func:`deepseek_env` is it with DeepSeek's documented values.

The key travels only in the returned in-memory overlay (as ``ANTHROPIC_AUTH_TOKEN``);
nothing here writes a file, so no settings file receives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = [
    "DEEPSEEK_ANTHROPIC_BASE_URL",
    "DEEPSEEK_FAST_MODEL",
    "DEEPSEEK_MAIN_MODEL",
    "anthropic_endpoint_env",
    "deepseek_env",
]

DEEPSEEK_ANTHROPIC_BASE_URL: Final = "https://api.deepseek.com/anthropic"
"""DeepSeek's Anthropic-compatible endpoint."""
DEEPSEEK_MAIN_MODEL: Final = "deepseek-v4-pro[1m]"
"""The model DeepSeek documents for Claude Code's main (and opus/sonnet) model."""
DEEPSEEK_FAST_MODEL: Final = "deepseek-v4-flash"
"""The model DeepSeek documents for Claude Code's fast (haiku) and subagent model."""


def anthropic_endpoint_env(
    auth_token: str,
    home: Path,
    *,
    base_url: str,
    model: str,
    fast_model: str,
    effort: str | None = None,
) -> dict[str, str | None]:
    """Claude Code's environment for an Anthropic-compatible endpoint, in an isolated home.

    ``ANTHROPIC_API_KEY`` is removed (``None``) so an inherited key never competes with
    ``auth_token``. ``HOME``, ``CLAUDE_CONFIG_DIR``, ``TMPDIR`` and the XDG directories
    are made under ``home`` (created here, empty); non-essential traffic, telemetry,
    error reporting and the auto-updater are off.

    Args:
        auth_token: The endpoint's key, sent as a bearer token (``ANTHROPIC_AUTH_TOKEN``).
        home: Where the isolated home directories go.
        base_url: The endpoint (``ANTHROPIC_BASE_URL``).
        model: The main model, also the opus and sonnet model.
        fast_model: The haiku model, also the model of Claude Code's own subagents.
        effort: ``CLAUDE_CODE_EFFORT_LEVEL``, if set.
    """
    dirs = {name: home / name for name in ("home", "claude-config", "tmp", "xdg")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    xdg = dirs["xdg"]
    env: dict[str, str | None] = {
        "ANTHROPIC_API_KEY": None,
        "ANTHROPIC_AUTH_TOKEN": auth_token,
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": fast_model,
        "CLAUDE_CODE_SUBAGENT_MODEL": fast_model,
    }
    if effort is not None:
        env["CLAUDE_CODE_EFFORT_LEVEL"] = effort
    env.update(
        {
            "HOME": str(dirs["home"]),
            "CLAUDE_CONFIG_DIR": str(dirs["claude-config"]),
            "TMPDIR": str(dirs["tmp"]),
            "XDG_CONFIG_HOME": str(xdg / "config"),
            "XDG_CACHE_HOME": str(xdg / "cache"),
            "XDG_DATA_HOME": str(xdg / "data"),
            "XDG_STATE_HOME": str(xdg / "state"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    )
    return env


def deepseek_env(
    api_key: str, home: Path, *, base_url: str = DEEPSEEK_ANTHROPIC_BASE_URL
) -> dict[str, str | None]:
    """:func:`anthropic_endpoint_env` for DeepSeek: its documented models, maximum effort.

    Args:
        api_key: The DeepSeek key (``DEEPSEEK_API_KEY``).
        home: Where the isolated home directories go.
        base_url: The official endpoint, except in tests of this code path.
    """
    return anthropic_endpoint_env(
        api_key,
        home,
        base_url=base_url,
        model=DEEPSEEK_MAIN_MODEL,
        fast_model=DEEPSEEK_FAST_MODEL,
        effort="max",
    )
