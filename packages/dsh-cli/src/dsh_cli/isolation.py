"""The ``--worktree`` flags of ``dsh run`` and ``dsh batch``; what they mean is
:mod:`dsh_profiles.isolation`'s."""

from __future__ import annotations

import argparse

__all__ = ["add_worktree_flags"]


def add_worktree_flags(
    parser: argparse.ArgumentParser, *, scope: str, warm: str | None = None
) -> None:
    """``--worktree`` and its settings; ``warm`` (its default, described) adds
    ``--worktree-warm``."""
    parser.add_argument(
        "--worktree",
        action="store_true",
        help=f"run {scope} in its own git worktree of the cwd's repository and commit "
        "its changes on a new branch (dsh/<id>); the main working tree is never touched",
    )
    parser.add_argument(
        "--worktree-base", metavar="REF", help="with --worktree: the base commit (default HEAD)"
    )
    parser.add_argument(
        "--worktree-branch",
        metavar="PATTERN",
        help="with --worktree: the new branch's name; {id} is the run's id (default dsh/{id})",
    )
    parser.add_argument(
        "--worktree-root",
        metavar="DIR",
        help="with --worktree: where worktrees live (default ~/.cache/dsh/worktrees)",
    )
    parser.add_argument(
        "--worktree-keep",
        action="store_true",
        help="with --worktree: keep the worktree after committing its changes",
    )
    if warm is not None:
        parser.add_argument(
            "--worktree-warm",
            metavar="N",
            type=int,
            help="with --worktree: how many worktrees to keep checked out and reuse "
            f"(0 to 64; default {warm})",
        )
