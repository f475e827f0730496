"""Building blocks every provider's cells share.

Hostile preludes (process-level faults run by :mod:`reliability.hostile` before the fake
starts), the planted-secret text a fake puts in its error payloads, an oversized
non-protocol line, and the default "the fake is holding" check.
"""

from __future__ import annotations

from typing import Any

from reliability.fakes import FakeSetup
from reliability.profiles import Profile

__all__ = [
    "LONG_LINE_BYTES",
    "LONG_LINE_RSS_BOUND",
    "crash_early",
    "daemon",
    "flood_stderr",
    "flood_stdout",
    "grandchild",
    "hang_early",
    "ignore_term",
    "long_line",
    "oversized_early",
    "oversized_line",
    "ready",
    "secret_text",
]


def ready(setup: FakeSetup) -> bool:
    return setup.ready_marker.exists()


def grandchild(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "setsid_grandchild", "pidfile": str(setup.pidfile("grandchild"))}]


def daemon(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "daemon", "pidfile": str(setup.pidfile("daemon"))}]


def ignore_term(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "ignore_term"}]


def flood_stderr(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    from reliability.planted import ENV_NAME

    return [{"do": "flood_stderr", "bytes": profile.flood_bytes, "env": ENV_NAME}]


def flood_stdout(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "flood_stdout", "bytes": profile.flood_bytes}]


def oversized_early(_setup: FakeSetup, profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "stdout_line", "bytes": profile.oversize_bytes}]


LONG_LINE_BYTES = 256 * 1024 * 1024
"""A 256 MiB line without a newline, in every profile."""

LONG_LINE_RSS_BOUND = 64 * 1024 * 1024
"""How much the host's RSS may grow while a product writes :data:`LONG_LINE_BYTES`."""


def long_line(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "endless_line", "bytes": LONG_LINE_BYTES}]


def crash_early(_setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "exit", "code": 3}]


def hang_early(setup: FakeSetup, _profile: Profile) -> list[dict[str, Any]]:
    return [{"do": "hang", "path": str(setup.ready_marker)}]


def secret_text(setup: FakeSetup) -> str:
    p = setup.planted
    return f"product failure: env={p.env} task={p.task} cwd={setup.workspace}"


def oversized_line(profile: Profile) -> str:
    return '{"type": "reliability_padding", "pad": "' + "x" * profile.oversize_bytes + '"}'
