"""The budget flags of ``dsh run`` and ``dsh batch``; their values are read by
:func:`dsh_profiles.options.budget_from`."""

from __future__ import annotations

import argparse

__all__ = ["add_budget_flags"]


def add_budget_flags(parser: argparse.ArgumentParser, *, scope: str) -> None:
    """``--timeout`` and ``--idle-timeout``, validated by :func:`budget_from`."""
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        help=f"wall-clock bound {scope}, startup included; only tightens the instance's "
        "configured deadline_seconds",
    )
    parser.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        help=f"longest stretch the product may stay silent {scope}; only tightens the "
        "instance's configured idle_timeout_seconds",
    )
