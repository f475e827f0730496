"""Which TCP ports the model endpoints of a Codex home's configuration listen on."""

from __future__ import annotations

import os
import tomllib

from dsh_subagent import endpoint_port

__all__ = ["OPENAI_PORT", "codex_endpoint_ports"]

OPENAI_PORT = 443
"""The built-in ``openai`` provider's port (https://api.openai.com)."""


def codex_endpoint_ports(codex_home: str) -> set[int]:
    """The ports of every ``base_url`` in ``<codex_home>/config.toml``, plus 443 when the
    configuration selects the built-in OpenAI provider (no ``model_provider``, ``openai``,
    or a name it does not define) or cannot be read."""
    try:
        with open(os.path.join(codex_home, "config.toml"), "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
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
