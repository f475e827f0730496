"""The ``dsh`` console script: Ctrl-C at any moment exits 130 without a traceback.

This module imports nothing heavy itself: everything (dsh-subprocess, and then the
command with anyio, pydantic and every provider library) is imported inside the ``try``,
so an interrupt during the second or so of imports is handled like one during a run. The
first thing the ``try`` does is make the process not dumpable
(:mod:`dsh_subprocess.protect`), before the command loads a profile or starts a product.
While a run is live, the command's own signal handling cancels it and waits for the
product's whole process tree.
"""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


def main() -> int:
    """Run ``dsh`` with ``sys.argv``; an interrupt outside a live run exits 130 quietly."""
    try:
        # Importing dsh_subprocess takes a moment (anyio, psutil): inside the try, so a
        # Ctrl-C during it exits 130 quietly too. No product exists before the command runs.
        from dsh_subprocess.protect import protect_command_process

        protect_command_process()  # first: the environment is readable until this returns
        from dsh_cli.cli import main as run_command

        return run_command()
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C cannot interrupt this
        print("dsh: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
