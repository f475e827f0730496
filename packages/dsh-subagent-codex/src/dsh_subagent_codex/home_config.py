"""What a Codex home's ``config.toml`` says that confinement needs: the ports of its model
endpoints and the sandbox Codex would use for commands."""

from __future__ import annotations

import os
import tomllib
from typing import Any

from dsh_subagent import endpoint_port

__all__ = ["DEFAULT_SANDBOX_MODE", "OPENAI_PORT", "codex_endpoint_ports", "native_sandbox_mode"]

OPENAI_PORT = 443
"""The built-in ``openai`` provider's port (https://api.openai.com)."""

DEFAULT_SANDBOX_MODE = "read-only"
"""Codex's sandbox for commands when its configuration names none."""


def _load(codex_home: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(codex_home, "config.toml"), "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None


def codex_endpoint_ports(codex_home: str) -> set[int]:
    """The ports of every ``base_url`` in ``<codex_home>/config.toml``, plus 443 when the
    configuration selects the built-in OpenAI provider (no ``model_provider``, ``openai``,
    or a name it does not define) or cannot be read."""
    document = _load(codex_home)
    if document is None:
        return {OPENAI_PORT}
    ports: set[int] = set()
    providers = document.get("model_providers")
    if isinstance(providers, dict):
        for entry in providers.values():
            url = entry.get("base_url") if isinstance(entry, dict) else None
            if isinstance(url, str) and (port := endpoint_port(url)) is not None:
                ports.add(port)
    selected = document.get("model_provider")
    if not isinstance(providers, dict) or selected not in providers:
        ports.add(OPENAI_PORT)
    return ports


def native_sandbox_mode(codex_home: str) -> str:
    """The ``sandbox_mode`` of ``<codex_home>/config.toml`` (``read-only`` when unset)."""
    document = _load(codex_home) or {}
    mode = document.get("sandbox_mode")
    return mode if isinstance(mode, str) else DEFAULT_SANDBOX_MODE
