"""The pinned ACP agents for tests and benchmarks, from ``scripts/install-acp-agent``.

The installer puts one agent's npm package (its pinned version: codex-acp by default,
or any agent it names, e.g. ``gemini-cli``) into the checkout's ignored
``.cache/acp-agents/`` (:data:`AGENTS_DIR`, passed as ``DSH_ACP_AGENTS_DIR``: tests never
install into the per-user data directory a user's installs go to) and prints the entry's
path (a native binary, or the JavaScript file ``node`` runs); a
second call is a fast path. Tests take :func:`codex_acp_or_skip` or
:func:`agent_or_skip`: a visible skip when the npm registry cannot be reached, a failure
for anything else.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final

__all__ = [
    "AGENTS_DIR",
    "INSTALLER",
    "RegistryUnreachableError",
    "agent_or_skip",
    "codex_acp_or_skip",
    "install_agent",
    "install_codex_acp",
]

INSTALLER: Final = Path(__file__).resolve().with_name("install-acp-agent")
AGENTS_DIR: Final = INSTALLER.parents[1] / ".cache" / "acp-agents"
_REGISTRY_UNREACHABLE: Final = 3  # the installer's exit status for it


class RegistryUnreachableError(RuntimeError):
    """The npm registry could not be reached, so the agent could not be installed."""


def install_codex_acp() -> str:
    """The absolute path of the native codex-acp binary, installing it when missing.

    Raises:
        RegistryUnreachableError: npm's registry cannot be reached.
        RuntimeError: the installer failed otherwise, or printed no existing binary.
    """
    return install_agent("codex-acp")


def install_agent(name: str) -> str:
    """The absolute path of agent ``name``'s entry, installing its pinned package when missing.

    Raises:
        RegistryUnreachableError: npm's registry cannot be reached.
        RuntimeError: the installer failed otherwise, or printed no existing entry.
    """
    try:
        done = subprocess.run(
            [str(INSTALLER), name],
            env={**os.environ, "DSH_ACP_AGENTS_DIR": str(AGENTS_DIR)},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"scripts/install-acp-agent could not run: {exc}") from exc
    if done.returncode == _REGISTRY_UNREACHABLE:
        raise RegistryUnreachableError(
            f"npm registry unreachable: scripts/install-acp-agent could not install {name}"
        )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/install-acp-agent failed ({done.returncode}): {done.stderr}")
    lines = done.stdout.strip().splitlines()
    if not lines or not Path(lines[-1]).is_file():
        raise RuntimeError(f"scripts/install-acp-agent printed no binary: {done.stdout!r}")
    return lines[-1]


def codex_acp_or_skip() -> str:
    """:func:`install_codex_acp` for a test: skip visibly without the registry, else fail."""
    return agent_or_skip("codex-acp")


def agent_or_skip(name: str) -> str:
    """:func:`install_agent` for a test: skip visibly without the registry, else fail."""
    import pytest

    try:
        return install_agent(name)
    except RegistryUnreachableError as exc:
        pytest.skip(str(exc))
    except RuntimeError as exc:
        pytest.fail(str(exc))
