"""Where the known ACP agents are installed: :func:`installed_agents`.

Looks for each shipped profile's pinned npm package (:func:`~dsh_subagent_acp.known_agents`)
in npm prefixes; starts nothing, runs no npm. A prefix is an npm prefix
(``DIR/node_modules/<package>``) or a folder of per-agent prefixes named
``<agent>-<version>`` (the layout ``scripts/install-acp-agent`` makes). The default
prefixes (:func:`default_prefixes`) are where that installer puts agents
(:func:`installer_dir`), the current directory and the global npm prefix of the
``node`` found on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dsh_subagent_acp.agents import AgentProfile, known_agents

__all__ = [
    "AGENTS_DIR_VARIABLE",
    "InstalledAgent",
    "default_prefixes",
    "installed_agents",
    "installer_dir",
]

AGENTS_DIR_VARIABLE: Final = "DSH_ACP_AGENTS_DIR"
"""Names the folder ``scripts/install-acp-agent`` installs into (and this module reads)."""


def installer_dir() -> Path | None:
    """Where ``scripts/install-acp-agent`` installs: the same rule as the script's.

    ``$DSH_ACP_AGENTS_DIR``, else the per-user
    ``${XDG_DATA_HOME:-~/.local/share}/dsh/acp-agents``; ``None`` when that per-user
    folder does not exist yet (nothing was installed there) or there is no ``HOME``.

    Raises:
        ValueError: ``DSH_ACP_AGENTS_DIR`` is set to something that is not a directory.
    """
    chosen = os.environ.get(AGENTS_DIR_VARIABLE)
    if chosen:
        path = Path(chosen)
        if not path.is_dir():
            raise ValueError(f"{AGENTS_DIR_VARIABLE} {chosen!r} is not a directory")
        return path
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG rule: a relative value is ignored
        home = os.environ.get("HOME")
        if not home:
            return None
        data = os.path.join(home, ".local", "share")
    path = Path(data) / "dsh" / "acp-agents"
    return path if path.is_dir() else None  # nothing installed there yet


def default_prefixes() -> list[Path]:
    """The installer's folder (if any), the current directory, node's global prefix.

    Raises:
        ValueError: as :func:`installer_dir`.
    """
    installed = installer_dir()
    prefixes = [installed] if installed is not None else []
    prefixes.append(Path.cwd())
    node = shutil.which("node")
    if node is not None:
        lib = Path(node).resolve().parent.parent / "lib"
        if lib.is_dir():
            prefixes.append(lib)
    return prefixes


@dataclass(frozen=True)
class InstalledAgent:
    """One known agent profile and where its pinned version is installed.

    Attributes:
        profile: The shipped profile.
        entry: The file to run (:meth:`AgentProfile.entry_in`), or ``None`` when the
            pinned version is in none of the prefixes.
    """

    profile: AgentProfile
    entry: Path | None


def installed_agents(prefixes: Sequence[Path] | None = None) -> list[InstalledAgent]:
    """Every known agent profile, by name, with the first prefix holding its pinned version.

    Args:
        prefixes: npm prefixes or folders of ``<agent>-<version>`` prefixes, in the
            order to look; default :func:`default_prefixes`. A path that is not a
            directory holds nothing.

    Raises:
        ValueError: as :func:`installer_dir` (default prefixes only).
    """
    where = default_prefixes() if prefixes is None else list(prefixes)
    found = []
    for profile in known_agents():
        entry = None
        for prefix in where:
            entry = profile.entry_in(prefix) or profile.entry_in(
                prefix / f"{profile.name}-{profile.version}"
            )
            if entry is not None:
                break
        found.append(InstalledAgent(profile, entry))
    return found
