"""The kit's pytest plugin: options and markers only.

pytest auto-loads this module (entry point ``pytest11``) in every session of every
project installed next to the kit, so it must stay harmless: it never collects, injects,
skips or reorders tests. Tests come only from the base classes a provider author
subclasses in their own test module. Users who disable plugin autoload load it with
``-p dsh_contract_tests`` (the entry-point name).
"""

from __future__ import annotations

import pytest

__all__ = ["MARKERS", "REQUIREMENT_MARKER", "pytest_addoption", "pytest_configure"]

REQUIREMENT_MARKER = "dsh_requirement"
"""Marker naming the manifest requirement id a kit test proves."""

MARKERS: dict[str, str] = {
    "keyless": "drives a real product against a loopback model fixture",
    "loader": "Loader composition, starts no product",
    "credentialed": "talks to the real DeepSeek service; self-skips without DEEPSEEK_API_KEY",
    REQUIREMENT_MARKER: "dsh_requirement(id): the contract-kit requirement id a test proves",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the kit's command-line options."""
    group = parser.getgroup("dsh-contract", "dsh subagent provider contract kit")
    group.addoption(
        "--dsh-secret-examples",
        type=int,
        default=None,
        help="hypothesis examples per planted-secret rule (default: the active profile)",
    )
    group.addoption(
        "--dsh-concurrency",
        type=int,
        default=None,
        help="parallel runs started by the concurrency rule (default: the suite's own)",
    )


def _registered_marker_names(config: pytest.Config) -> set[str]:
    names: set[str] = set()
    for line in config.getini("markers"):
        names.add(line.split(":", 1)[0].split("(", 1)[0].strip())
    return names


def pytest_configure(config: pytest.Config) -> None:
    """Register the tier and requirement markers unless the project already did."""
    known = _registered_marker_names(config)
    for name, description in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {description}")
