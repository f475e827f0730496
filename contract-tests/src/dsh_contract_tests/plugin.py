"""The kit's pytest plugin: options and markers only.

pytest auto-loads this module (entry point ``pytest11``) in every session of every
project installed next to the kit, so it must stay harmless: it never collects, injects,
skips or reorders tests. Tests come only from the base classes a provider author
subclasses in their own test module. Users who disable plugin autoload load it with
``-p dsh_contract_tests`` (the entry-point name).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

__all__ = [
    "MARKERS",
    "REQUIREMENT_MARKER",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_makereport",
]

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


_XPASS_STRICT = "[XPASS(strict)]"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Name the rule and what to do when an opted-out kit test passes (a strict XPASS)."""
    report = yield
    longrepr = report.longrepr
    if report.failed and isinstance(longrepr, str) and longrepr.startswith(_XPASS_STRICT):
        marker = item.get_closest_marker(REQUIREMENT_MARKER)
        if marker is not None and marker.args:
            reason = longrepr[len(_XPASS_STRICT) :].strip()
            report.longrepr = (
                f"{_XPASS_STRICT} {marker.args[0]}: the provider now meets this rule, so its "
                f"opt-out must be removed (delete the override of {item.name.split('[')[0]} "
                f"and its xfail); the opt-out's reason was: {reason}"
            )
    return report
