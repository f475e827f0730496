"""Ready products on the command line: ``--warm N`` and each surface's default.

An instance's ``warm`` (how many products the service keeps started and past their
handshake, docs/harness.md "Ready products") is a field of its configuration, so a
profile row sets it like any other. ``dsh batch``, ``dsh mcp`` and Ray actors run many
delegations in one place and default it on for the rows that leave it unset; ``--warm N``
sets every instance's, over the profile.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

__all__ = [
    "BATCH_WARM_MAX",
    "SERVER_WARM",
    "Warm",
    "add_warm_flag",
    "apply_warm",
    "batch_warm",
    "warm_from_flag",
]

BATCH_WARM_MAX = 4
"""The most products ``dsh batch`` keeps ready by default: a finished task's slot is
refilled from the pool at once while the replacement starts beside the running tasks;
more idle products cost memory and take no more time off."""

SERVER_WARM = 1
"""``dsh mcp`` and a Ray actor: one product ready for the next delegation."""


@dataclass(frozen=True)
class Warm:
    """A ``warm`` to apply: ``over_profile`` (the flag) or only where a row sets none."""

    value: int
    over_profile: bool = False


def add_warm_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """``--warm N``: every instance's ``warm``, over the profile's."""
    parser.add_argument(
        "--warm",
        type=_count,
        default=None,
        metavar="N",
        help=f"products kept ready per instance, over the profile's warm (default: {default}; "
        "0 starts every delegation cold); see docs/harness.md",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"--warm must be an integer from 0 to 64, not {text!r}")
    return value


def warm_from_flag(flag: int | None, default: int) -> Warm:
    """The flag's value over the profile, else ``default`` where a row sets none."""
    return Warm(default) if flag is None else Warm(flag, over_profile=True)


def batch_warm(flag: int | None, concurrency: int) -> Warm:
    """``dsh batch``'s: the flag, else ``min(concurrency, BATCH_WARM_MAX)``."""
    return warm_from_flag(flag, min(concurrency, BATCH_WARM_MAX))


def apply_warm(raw_config: dict[str, Any], config_model: type[BaseModel], warm: Warm) -> None:
    """Set ``warm`` in a row's raw configuration (a provider without the field is left
    alone: it has no ready starts)."""
    if "warm" not in config_model.model_fields:
        return
    if warm.over_profile or "warm" not in raw_config:
        raw_config["warm"] = warm.value
