"""``dsh agents``: the known ACP agent profiles and whether each pinned package is installed.

Where each profile shipped with dsh-subagent-acp is installed is that library's
answer (:func:`dsh_subagent_acp.installed_agents`: it starts nothing, runs no npm);
this command reads ``--prefix`` and prints the table. Without ``--prefix``: the library's
default prefixes (where ``scripts/install-acp-agent`` puts agents, ``$DSH_ACP_AGENTS_DIR``
else ``${XDG_DATA_HOME:-~/.local/share}/dsh/acp-agents``; the current directory; the
global npm prefix of the ``node`` found on ``PATH``).
"""

from __future__ import annotations

import argparse
import os
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


def cmd_agents(args: argparse.Namespace, out: TextIO) -> int:
    """Print one line per known agent profile; exit 0."""
    try:
        from dsh_subagent_acp import installed_agents
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "dsh_subagent_acp":
            raise
        raise UsageError(
            "`dsh agents` needs the dsh-subagent-acp distribution, which is not installed "
            "(pip install dsh-subagent-acp)"
        ) from None
    prefixes = [Path(p) for p in args.prefix] if args.prefix else None
    for prefix in prefixes or ():
        if not prefix.is_dir():
            raise UsageError(f"--prefix {os.fspath(prefix)!r} is not a directory")
    try:
        found = installed_agents(prefixes)
    except ValueError as exc:  # $DSH_ACP_AGENTS_DIR names no directory
        raise UsageError(str(exc)) from None
    rows = [("AGENT", "PACKAGE", "KEYLESS WIRE", "INSTALLED")]
    for agent in found:
        profile = agent.profile
        rows.append(
            (
                profile.name,
                f"{profile.package}@{profile.version}",
                profile.keyless.wire,
                str(agent.entry) if agent.entry is not None else "not installed",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.write("  ".join([*cells, row[3]]).rstrip() + "\n")
    return 0
