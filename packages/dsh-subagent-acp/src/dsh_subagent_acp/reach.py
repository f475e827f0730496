"""What an ACP agent may reach when confined: its installation, its runtime, its home
and the model endpoints its configuration names (see docs/security.md)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Mapping, Sequence

from dsh_subagent import (
    ProductReach,
    default_reach,
    endpoint_port,
    program_install,
    toml_endpoint_ports,
)
from dsh_subprocess import child_env

__all__ = [
    "DEFAULT_AGENT_PORT",
    "KNOWN_HOMES",
    "PTY_AGENTS",
    "agent_reach",
    "free_loopback_port",
    "opencode_endpoint_ports",
    "served_port",
]

DEFAULT_AGENT_PORT = 443
"""The port allowed when nothing in the configuration names an endpoint: HTTPS, where
every hosted model API the known agents use listens."""

KNOWN_HOMES: Mapping[str, tuple[str, str]] = {
    "codex": ("CODEX_HOME", ".codex"),
    "gemini": ("GEMINI_CLI_HOME", ".gemini"),
    "claude": ("CLAUDE_CONFIG_DIR", ".claude"),
}
"""A known agent (by a word in its command's name, or in its script's npm package): the
variable naming its home and the home's default name under ``$HOME``. The home is
written (sessions, logs)."""

PTY_AGENTS: tuple[str, ...] = ("codex", "gemini", "qwen")
"""Known agents (by a word in the command's name, or in its script's npm package) that
run commands on a pseudo-terminal (Gemini CLI and Qwen Code: node-pty, whose shell tool
otherwise fails ``forkpty(3) failed``)."""

_RUNTIMES = ("node", "bun", "deno", "python3", "python")

# OpenCode names a provider's endpoint `provider.<id>.options.baseURL` in its JSON config.
_OPENCODE_URL_KEY = "baseURL"


def _interpreter(program: str) -> str | None:
    """The runtime a script's ``#!`` line names (``#!/usr/bin/env node`` → ``node``)."""
    try:
        with open(program, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    for word in words:
        name = os.path.basename(word)
        if name in _RUNTIMES:
            return word if os.path.isabs(word) else name
    return None


def _runs_script(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs a script with a runtime (``node <entry.js> …``)."""
    return len(argv) > 1 and os.path.basename(argv[0]) in _RUNTIMES


def _script_package(script: str) -> str:
    """The npm package path of a script (``@google/gemini-cli/bundle/gemini.js``): what
    names a known agent started as ``node <entry.js>``."""
    parts = script.split(os.sep)
    if "node_modules" not in parts:
        return os.path.basename(script)
    last = len(parts) - 1 - parts[::-1].index("node_modules")
    return "/".join(parts[last + 1 :])


def _base_url_values(node: object) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == _OPENCODE_URL_KEY and isinstance(value, str):
                yield value
            else:
                yield from _base_url_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _base_url_values(item)


def _json_endpoint_ports(text: str) -> set[int]:
    """Ports of every ``baseURL`` in a JSON document (none when it is not JSON)."""
    try:
        document = json.loads(text)
    except ValueError:
        return set()
    return {port for url in _base_url_values(document) if (port := endpoint_port(url)) is not None}


def opencode_endpoint_ports(env: Mapping[str, str | None]) -> set[int]:
    """Ports of the ``baseURL``s in OpenCode's configuration given by the environment:
    the inline ``OPENCODE_CONFIG_CONTENT`` and the file ``OPENCODE_CONFIG`` names.

    A confined OpenCode reaches only these (or 443): without its custom provider's port
    every prompt ends ``Cannot connect to API`` before any model request is sent.
    """
    ports: set[int] = set()
    inline = env.get("OPENCODE_CONFIG_CONTENT")
    if inline:
        ports |= _json_endpoint_ports(inline)
    path = env.get("OPENCODE_CONFIG")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                ports |= _json_endpoint_ports(handle.read(1 << 20))
        except (OSError, UnicodeDecodeError):
            pass  # unreadable: the agent cannot read it either
    return ports


def agent_reach(argv: Sequence[str], env: Mapping[str, str | None]) -> ProductReach:
    """The agent's installation (its command's directory and package, resolved through
    symlinks; also the script's when the command is a runtime: ``node <entry.js>``), the
    runtime a script's ``#!`` line names, its home when it is a known agent, and the ports
    of ``*_BASE_URL`` variables and of a Codex home's ``config.toml`` (443 when none is
    named), and for OpenCode the ``baseURL``s of its configuration
    (:func:`opencode_endpoint_ports`) and the file ``OPENCODE_CONFIG`` names (read);
    pseudo-terminals for a known agent that runs
    commands on one."""
    base = default_reach(argv, env)
    child = child_env(env)
    search = child.get("PATH")
    read = list(base.read)
    found = argv[0] if os.path.isabs(argv[0]) else None
    if found is None and base.read:
        found = os.path.join(base.read[0], os.path.basename(argv[0]))
    runtime = _interpreter(found) if found else None
    if runtime is not None:
        read += program_install(runtime, search)
    if _runs_script(argv) and os.path.isabs(argv[1]):
        # `node <entry.js>`: the installation is the script's package, not node's.
        read += program_install(argv[1])
    write: list[str] = []
    command = os.path.basename(argv[0]).lower()
    if _runs_script(argv):
        command += " " + _script_package(argv[1]).lower()
    home_root = child.get("HOME") or os.path.expanduser("~")
    for word, (variable, default) in KNOWN_HOMES.items():
        if word in command:
            write.append(child.get(variable) or os.path.join(home_root, default))
    ports = set(base.connect_ports)
    codex_home = child.get("CODEX_HOME")
    if codex_home:
        ports |= toml_endpoint_ports(os.path.join(codex_home, "config.toml")) or set()
    if "opencode" in command:
        ports |= opencode_endpoint_ports(child)
        named = child.get("OPENCODE_CONFIG")
        if named and os.path.isabs(named):
            read.append(named)  # the configuration file the user names, read only
    return ProductReach(
        read=tuple(read),
        write=tuple(write),
        connect_ports=tuple(sorted(ports or {DEFAULT_AGENT_PORT})),
        pseudo_terminals=any(word in command for word in PTY_AGENTS),
    )


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now, for an agent that serves itself on one (the
    kernel picks it; the agent binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def served_port(argv: Sequence[str], serve_port_arg: str | None) -> int | None:
    """The port ``argv`` passes after ``serve_port_arg`` (the last one), if any."""
    if serve_port_arg is None:
        return None
    found = [i for i, arg in enumerate(argv[:-1]) if arg == serve_port_arg]
    if not found:
        return None
    try:
        return int(argv[found[-1] + 1])
    except ValueError:
        return None
