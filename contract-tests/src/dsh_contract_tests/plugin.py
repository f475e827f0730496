"""The kit's pytest plugin: options and markers only.

pytest auto-loads this module (entry point ``pytest11``) in every session of every
project installed next to the kit, so it must stay harmless: it never collects, injects,
skips or reorders tests. Tests come only from the base classes a provider author
subclasses in their own test module. In a session that collects such a class it keeps
the run's account (:mod:`dsh_contract_tests.ledger`): a rule that did not run for that
class fails the run, listed by id in the summary, unless it was opted out honestly.
Users who disable plugin autoload load it with ``-p dsh_contract_tests`` (the
entry-point name); it then brings anyio's pytest plugin, which runs the kit's async
tests, unless that is already loaded or blocked (``-p no:anyio``).
"""

from __future__ import annotations

import argparse
from collections.abc import Generator

import pytest

from dsh_contract_tests import ledger
from dsh_contract_tests.manifest import REQUIREMENT_MARKER

__all__ = [
    "MARKERS",
    "REQUIREMENT_MARKER",
    "VERIFY_CHANNEL_OPTION",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_makereport",
]

MARKERS: dict[str, str] = {
    "keyless": "drives a real product against a loopback model fixture",
    "loader": "Loader composition, starts no product",
    "credentialed": "talks to the real DeepSeek service; self-skips without DEEPSEEK_API_KEY",
    REQUIREMENT_MARKER: "dsh_requirement(id): the contract-kit requirement id a test proves",
}


ANYIO_PLUGIN = "anyio"
"""The entry-point name of anyio's pytest plugin, which runs the kit's async tests."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Load anyio's pytest plugin with the kit when autoload did not (and it is not blocked).

    Runs when this plugin is registered: with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` and only
    ``-p dsh_contract_tests``, every async kit test would otherwise fail with "async def
    functions are not natively supported".
    """
    if pluginmanager.has_plugin(ANYIO_PLUGIN) or pluginmanager.is_blocked(ANYIO_PLUGIN):
        return
    from anyio import pytest_plugin

    if not pluginmanager.is_registered(pytest_plugin):
        pluginmanager.register(pytest_plugin, ANYIO_PLUGIN)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


VERIFY_CHANNEL_OPTION = "--dsh-verify-channel"
"""Set only by a verify run (``python -m dsh_contract_tests verify``) in its children."""

_XDIST_KEY = "dsh_contract_account"
"""Where a pytest-xdist worker hands its share of the account to the controller."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the kit's command-line options."""
    group = parser.getgroup("dsh-contract", "dsh subagent provider contract kit")
    group.addoption(
        VERIFY_CHANNEL_OPTION,
        type=int,
        default=None,
        metavar="FD",
        help=argparse.SUPPRESS,
    )
    group.addoption(
        "--dsh-secret-examples",
        type=_positive,
        default=None,
        metavar="N",
        help="hypothesis examples of the planted-secret rule (default: the test class's "
        "secret_examples)",
    )
    group.addoption(
        ledger.PARTIAL_OPTION,
        action="store_true",
        default=False,
        help="run a subset of the kit on purpose (-k, -m, node ids): the rules not selected "
        "are listed as a partial run, which still fails the run (never a full pass)",
    )
    group.addoption(
        "--dsh-concurrency",
        type=_positive,
        default=None,
        metavar="N",
        help="parallel runs started by the concurrency rule (default: the test class's "
        "concurrency)",
    )


def _registered_marker_names(config: pytest.Config) -> set[str]:
    names: set[str] = set()
    for line in config.getini("markers"):
        names.add(line.split(":", 1)[0].split("(", 1)[0].strip())
    return names


def pytest_configure(config: pytest.Config) -> None:
    """Register the tier and requirement markers unless the project already did, and the
    run's account of the provider test classes."""
    known = _registered_marker_names(config)
    for name, description in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {description}")
    channel = config.getoption(VERIFY_CHANNEL_OPTION, default=None)
    if channel is not None:
        from dsh_contract_tests import verify_child

        verify_child.open_channel(channel)  # before any provider code is imported
    partial = bool(config.getoption(ledger.PARTIAL_OPTION, default=False))
    book = ledger.Ledger(_expected_ids, partial_allowed=partial)
    accounting = _Accounting(book, verify=channel is not None)
    config.pluginmanager.register(accounting)


def _expected_ids(base_name: str) -> list[str]:
    """The ids the kit base class ``base_name`` owes, read from the real base classes.

    Imported only when a session has a provider test class to account for: the plugin
    loads in every project and must not pull in the rules there.
    """
    from dsh_contract_tests.contract import CredentialedProviderContract, ProviderContract

    bases = {b.__name__: b for b in (ProviderContract, CredentialedProviderContract)}
    return ledger.expected_ids(bases[base_name])


class _Accounting:
    """The hooks that feed one session's :class:`~dsh_contract_tests.ledger.Ledger`."""

    def __init__(self, book: ledger.Ledger, *, verify: bool = False) -> None:
        self.book = book
        self.verify = verify  # a verify child: its parent keeps the account
        self.lines: list[str] = []
        self.merged: ledger.Export | None = None  # the workers' accounts (xdist controller)

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Class) and ledger.kit_base(collector.obj) is not None:
            self.book.collected_class(collector.nodeid, collector.obj)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.book.collected_item(item)  # before any selection or hook can drop it

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.book.deselect(items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.book.collection_finished(session.items)
        if self.verify:  # what the verify parent expects evidence of, before any provider code
            from dsh_contract_tests.verify_child import emit

            for item in session.items:
                if item.nodeid in self.book.items:
                    emit({"event": "collected", "node": item.nodeid})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        with ledger.running(self.book, item.nodeid):
            return (yield)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.book.report(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """A pytest-xdist worker ended: merge its share of the account."""
        share = getattr(node, "workeroutput", {}).get(_XDIST_KEY)
        if share is not None:
            self.merged = ledger.merge(self.merged, share)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.verify:
            return
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller accounts
            if self.book.classes:
                workeroutput[_XDIST_KEY] = self.book.export()
            return
        if self.merged is not None:
            partial = self.book.partial_allowed
            accounts = ledger.accounts(self.merged, _expected_ids, partial_allowed=partial)
        elif self.book.classes:
            accounts = self.book.account()
        else:
            return
        self.lines = [line for account in accounts for line in account.lines()]
        incomplete = any(a.missing or a.partial for a in accounts)
        if incomplete and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.lines:
            terminalreporter.write_sep("=", "dsh contract kit: the rules of each provider class")
            for line in self.lines:
                terminalreporter.write_line(line)


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
