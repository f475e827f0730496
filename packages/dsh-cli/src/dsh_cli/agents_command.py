"""``dsh agents``: the known ACP agent profiles and whether each pinned package is installed.

Reads the profiles shipped with dsh-subagent-acp (``dsh_subagent_acp.known_agents``) and
looks for each pinned npm package in the given prefixes; starts nothing, runs no npm.
A prefix is an npm prefix (``DIR/node_modules/<package>``) or a folder of per-agent
prefixes named ``<agent>-<version>`` (the layout ``scripts/install-acp-agent`` makes).
Without ``--prefix``: where that installer puts agents (``$DSH_ACP_AGENTS_DIR``, else the
per-user ``${XDG_DATA_HOME:-~/.local/share}/dsh/acp-agents``), the current directory and
the global npm prefix of the ``node`` found on ``PATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import Any, TextIO

from dsh_profiles.errors import UsageError

__all__ = ["add_agents_parser", "cmd_agents"]


def add_agents_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dsh agents`` on the ``dsh`` sub-command parsers."""
    agents = sub.add_parser(
        "agents",
        parents=[common],
        help="list the known ACP agent profiles and whether each pinned package is installed",
        description="List the ACP agent profiles shipped with dsh-subagent-acp: the pinned "
        "npm package, the model API its keyless wiring speaks, and where the pinned version "
        "is installed. Starts nothing.",
    )
    agents.add_argument(
        "--prefix",
        action="append",
        default=None,
        metavar="DIR",
        help="an npm prefix (or a folder of <agent>-<version> prefixes) to look in; "
        "repeatable (default: $DSH_ACP_AGENTS_DIR, else ~/.local/share/dsh/acp-agents, "
        "where scripts/install-acp-agent installs; the current directory; node's global "
        "prefix)",
    )


AGENTS_DIR_VARIABLE = "DSH_ACP_AGENTS_DIR"


def _installer_dir() -> Path | None:
    """Where ``scripts/install-acp-agent`` installs: the same rule as the script's."""
    chosen = os.environ.get(AGENTS_DIR_VARIABLE)
    if chosen:
        path = Path(chosen)
        if not path.is_dir():
            raise UsageError(f"{AGENTS_DIR_VARIABLE} {chosen!r} is not a directory")
        return path
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG rule: a relative value is ignored
        home = os.environ.get("HOME")
        if not home:
            return None
        data = os.path.join(home, ".local", "share")
    path = Path(data) / "dsh" / "acp-agents"
    return path if path.is_dir() else None  # nothing installed there yet


def _default_prefixes() -> list[Path]:
    installed = _installer_dir()
    prefixes = [installed] if installed is not None else []
    prefixes.append(Path.cwd())
    node = shutil.which("node")
    if node is not None:
        lib = Path(node).resolve().parent.parent / "lib"
        if lib.is_dir():
            prefixes.append(lib)
    return prefixes


def cmd_agents(args: argparse.Namespace, out: TextIO) -> int:
    """Print one line per known agent profile; exit 0."""
    try:
        from dsh_subagent_acp import known_agents
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "dsh_subagent_acp":
            raise
        raise UsageError(
            "`dsh agents` needs the dsh-subagent-acp distribution, which is not installed "
            "(pip install dsh-subagent-acp)"
        ) from None
    prefixes = [Path(p) for p in args.prefix] if args.prefix else _default_prefixes()
    for prefix in prefixes:
        if not prefix.is_dir():
            raise UsageError(f"--prefix {os.fspath(prefix)!r} is not a directory")
    rows = [("AGENT", "PACKAGE", "KEYLESS WIRE", "INSTALLED")]
    for profile in known_agents():
        found = None
        for prefix in prefixes:
            found = profile.entry_in(prefix) or profile.entry_in(
                prefix / f"{profile.name}-{profile.version}"
            )
            if found is not None:
                break
        rows.append(
            (
                profile.name,
                f"{profile.package}@{profile.version}",
                profile.keyless.wire,
                str(found) if found is not None else "not installed",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.write("  ".join([*cells, row[3]]).rstrip() + "\n")
    return 0
