"""The ``dsh batch`` command line: its arguments, checked as argparse reads them.

What the arguments mean is :mod:`dsh_cli.batch`'s; how a batch runs is :mod:`dsh_batch`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from dsh_batch.engine import FILES_PLACEHOLDER
from dsh_profiles.confinement import add_confinement_flag
from dsh_profiles.warm import BATCH_WARM_MAX, SERVER_WARM, add_warm_flag

from dsh_cli.isolation import add_worktree_flags
from dsh_cli.options import add_budget_flags

__all__ = ["add_batch_parser"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def add_output_schema_flag(parser: argparse.ArgumentParser) -> None:
    """The ``--output-schema`` option of ``dsh batch``."""
    parser.add_argument(
        "--output-schema",
        metavar="FILE",
        default=None,
        help="a JSON Schema (object root) every task's answer must match, unless the task "
        "line has its own output_schema; records then carry 'structured' (the validated "
        "object), and an answer that does not match is an error record (output-invalid)",
    )


def add_batch_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dsh batch`` on the ``dsh`` subcommand parsers."""
    batch = sub.add_parser(
        "batch",
        parents=[common],
        help="delegate every task of a JSON Lines file, here or on a Ray cluster",
        description="Run every task of TASKS (one JSON object per line: id, task, optional "
        "cwd) on one provider instance and append one record per task to --out as each "
        "settles. Ids already in --out are skipped, so the same command resumes an "
        "interrupted batch; the latest record per id counts.",
        epilog="exit status: 0 every task completed, 1 a task failed or a line was bad, "
        "2 usage/profile error or another batch holds --out (nothing started, nothing "
        "recorded), 130 interrupted (Ctrl-C cancels every "
        "run and exits once every product process tree is gone)",
    )
    batch.add_argument("profile", help="TOML profile path")
    batch.add_argument("target", help="a tool name from the profile, or an instance name")
    batch.add_argument("tasks", help="the task file (JSON Lines)")
    batch.add_argument("--out", required=True, help="the results file (JSON Lines, appended)")
    batch.add_argument(
        "--instance", action="store_true", help="treat TARGET as an instance name only"
    )
    batch.add_argument(
        "-j",
        "--concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="runs at a time (default: the CPU count here; the cluster's CPUs with --ray)",
    )
    batch.add_argument(
        "--cwd",
        default=None,
        help="base directory of relative task cwds and the cwd of tasks without one "
        "(default: the current directory; with --ray: the shipped --files directory)",
    )
    batch.add_argument(
        "--files",
        default=None,
        help=f"a directory the profile and task cwds may name as {FILES_PLACEHOLDER}; "
        "shipped to every node with --ray",
    )
    add_output_schema_flag(batch)
    add_budget_flags(batch, scope="per task")
    add_worktree_flags(batch, scope="each task", warm="the concurrency")
    add_confinement_flag(batch)
    add_warm_flag(batch, f"min(--concurrency, {BATCH_WARM_MAX}); {SERVER_WARM} per Ray actor")
    batch.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run on Ray (needs dsh-batch[ray]); without ADDRESS: RAY_ADDRESS, else the "
        "cluster started on this machine with `ray start`, else a new local Ray instance",
    )
    batch.add_argument(
        "--retry-failed",
        action="store_true",
        help="also run the tasks whose latest record in --out is not completed (a new "
        "record is appended; the latest record per id counts)",
    )
    batch.add_argument(
        "--ray-retries",
        type=_non_negative_int,
        default=0,
        help="with --ray: times a task is started again when its Ray worker dies "
        "mid-task (default 0: the task is recorded as failed)",
    )
