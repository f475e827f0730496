"""The account of a kit run: did every rule run for every provider test class?

A kit run is a pass only if, for every provider test class (a collected subclass of a
kit base class), each requirement id of that base ran — passed, failed, or was skipped by
the kit itself with its reason (a capability the provider declares, a missing key) — or
was opted out honestly: at the method, by the documented override with
``xfail(strict=True, reason=...)`` (see :mod:`dsh_contract_tests.guard`).

Anything else that kept a rule from running fails the run, one line per class naming
the ids and why: a skip or xfail mark on the class or module, a deselection (``-k``,
``-m``), an item a collection hook removed, a skip raised by code that is not the kit's,
a report rewritten by a hook. ``--dsh-partial`` runs a subset on purpose: the ids that
were not selected are then listed as a partial run, which is never a full pass either.

Two halves meet here. The kit's rule wrapper (:func:`dsh_contract_tests.failures.bind_rule`)
calls :func:`record` with what its rule did; the plugin feeds :class:`Ledger` with what
pytest collected, selected and reported, and asks it for the account at the end. The
plugin is auto-loaded in every project, so this module imports only the manifest (data)
of the kit: the base classes, which say which ids a class owes, sit floors above and are
read through the :data:`ExpectedIds` callable the plugin hands in.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import pytest

from dsh_contract_tests.manifest import REQUIREMENT_MARKER

__all__ = [
    "KIT_BASES",
    "PARTIAL_OPTION",
    "ClassAccount",
    "ExpectedIds",
    "Export",
    "Ledger",
    "NodeVerdict",
    "Outcome",
    "accounting",
    "accounts",
    "current_nodeid",
    "merge",
    "record",
    "running",
]

PARTIAL_OPTION: Final = "--dsh-partial"
"""Run a subset of the kit on purpose: the unselected ids are reported as a partial run."""

KIT_BASES: Final = ("ProviderContract", "CredentialedProviderContract")
"""Names of the kit's base classes in :mod:`dsh_contract_tests.contract`."""

_KIT_MODULE: Final = "dsh_contract_tests.contract"
_OVERRIDE: Final = "__dsh_override__"

ExpectedIds = Callable[[str], list[str]]
"""The requirement ids the kit base class of a name in :data:`KIT_BASES` owes."""

Outcome = Literal[
    "passed",
    "failed",
    "kit-skip",
    "consequence",
    "foreign-skip",
    "foreign-xfail",
    "interrupted",
]
"""What a kit rule did, as its wrapper saw it: ``foreign-*`` is a skip or xfail raised
inside the rule by code that is not the kit's (the provider, a fixture, the factory)."""


@dataclass(frozen=True, slots=True)
class _Running:
    ledger: Ledger
    nodeid: str


_RUNNING: contextvars.ContextVar[_Running | None] = contextvars.ContextVar(
    "dsh_contract_running_item", default=None
)


@contextmanager
def running(ledger: Ledger, nodeid: str) -> Iterator[None]:
    """Mark the test ``nodeid`` of ``ledger``'s session as the one running here."""
    token = _RUNNING.set(_Running(ledger, nodeid))
    try:
        yield
    finally:
        _RUNNING.reset(token)


def accounting() -> bool:
    """Whether the running test is accounted for (the kit's plugin wraps its call)."""
    return _RUNNING.get() is not None


def current_nodeid() -> str | None:
    """The node id of the test the plugin is running here, if any."""
    current = _RUNNING.get()
    return None if current is None else current.nodeid


def record(req_id: str, outcome: Outcome, detail: str = "") -> None:
    """What the outermost kit rule of the running test did (no-op outside a kit run)."""
    current = _RUNNING.get()
    if current is not None:
        current.ledger.records.setdefault(current.nodeid, (req_id, outcome, detail))


def kit_base(cls: object) -> type | None:
    """The kit base class ``cls`` derives from, or ``None`` (not a provider test class)."""
    if not isinstance(cls, type):
        return None
    for base in cls.__mro__[1:]:
        if base.__module__ == _KIT_MODULE and base.__name__ in KIT_BASES:
            return base
    return None


def expected_ids(base: type) -> list[str]:
    """The requirement ids the kit tests of ``base`` carry, in class order."""
    ids: list[str] = []
    for name, func in vars(base).items():
        if name.startswith("test_") and callable(func):
            for mark in getattr(func, "pytestmark", []):
                if mark.name == REQUIREMENT_MARKER and mark.args[0] not in ids:
                    ids.append(str(mark.args[0]))
    return ids


def _honest_opt_out(item: pytest.Item) -> str | None:
    """The reason of ``item``'s documented opt-out, if that is what its xfail is."""
    function = getattr(item, "function", None)
    if function is None or not hasattr(function, _OVERRIDE):
        return None
    own = [m for m in getattr(function, "pytestmark", []) if m.name == "xfail"]
    applied = next(iter(item.iter_markers("xfail")), None)
    if applied is None or not any(applied is m or applied == m for m in own):
        return None
    reason = applied.kwargs.get("reason") or (applied.args[1] if len(applied.args) > 1 else "")
    if applied.kwargs.get("strict") is not True or not str(reason).strip():
        return None
    return str(reason)


@dataclass
class ClassAccount:
    """One provider test class's account: what each of its ids did.

    ``missing`` and ``partial`` map an id to why its tests did not run (each reason with
    how many of the id's tests it kept from running); ``cases`` counts each id's tests.
    """

    nodeid: str
    ids: list[str]
    cases: dict[str, int] = field(default_factory=dict)
    missing: dict[str, dict[str, int]] = field(default_factory=dict)
    partial: dict[str, dict[str, int]] = field(default_factory=dict)
    opted_out: dict[str, str] = field(default_factory=dict)

    def _listed(self, found: dict[str, dict[str, int]]) -> str:
        """``<why>: <id>, <id> (<n> of <m> cases); <why>: ...``, one group per reason."""
        groups: dict[str, list[str]] = {}
        for req_id, whys in found.items():
            total = self.cases.get(req_id, 0)
            for why, count in whys.items():
                some = f" ({count} of {total} cases)" if 1 < total != count else ""
                groups.setdefault(why, []).append(req_id + some)
        return "; ".join(f"{why}: {', '.join(ids)}" for why, ids in groups.items())

    def lines(self) -> list[str]:
        """The summary lines of this class (one per kind of finding)."""
        out: list[str] = []
        if self.missing:
            out.append(
                f"dsh-contract FAILED {self.nodeid}: {len(self.missing)} of {len(self.ids)} "
                f"rules did not run. {self._listed(self.missing)}"
            )
        if self.partial:
            out.append(
                f"dsh-contract PARTIAL {self.nodeid}: {len(self.partial)} of {len(self.ids)} "
                f"rules not selected ({PARTIAL_OPTION}), not a full pass. "
                f"{self._listed(self.partial)}"
            )
        if self.opted_out:
            listed = ", ".join(f"{i} ({why})" for i, why in self.opted_out.items())
            out.append(f"dsh-contract OPTED OUT {self.nodeid}: {listed}")
        if not out:
            out.append(f"dsh-contract {self.nodeid}: every one of its {len(self.ids)} rules ran")
        return out


@dataclass
class Ledger:
    """What pytest collected, selected and reported for the provider test classes of one
    session, and what each kit rule did (see the module docstring)."""

    expected: ExpectedIds
    partial_allowed: bool = False
    classes: dict[str, type] = field(default_factory=dict)
    items: dict[str, tuple[str, str]] = field(default_factory=dict)
    honest: dict[str, str | None] = field(default_factory=dict)
    deselected: set[str] = field(default_factory=set)
    selected: set[str] | None = None
    reports: dict[str, dict[str, pytest.TestReport]] = field(default_factory=dict)
    records: dict[str, tuple[str, Outcome, str]] = field(default_factory=dict)

    def collected_class(self, nodeid: str, cls: type) -> None:
        """A provider test class was collected."""
        self.classes.setdefault(nodeid, cls)

    def collected_item(self, item: pytest.Item) -> None:
        """A test was collected (before any selection)."""
        cls = getattr(item, "cls", None)
        if kit_base(cls) is None:
            return
        marker = item.get_closest_marker(REQUIREMENT_MARKER)
        if marker is None or not marker.args:
            return
        parent = item.parent
        class_id = parent.nodeid if parent is not None else item.nodeid.rsplit("::", 1)[0]
        if cls is not None:
            self.collected_class(class_id, cls)
        self.items[item.nodeid] = (class_id, str(marker.args[0]))

    def deselect(self, items: Iterable[pytest.Item]) -> None:
        """Tests deselected (``-k``, ``-m`` or a hook that said so)."""
        self.deselected.update(item.nodeid for item in items)

    def collection_finished(self, items: Iterable[pytest.Item]) -> None:
        """The final selection; an item missing from it was removed by a hook."""
        final = list(items)
        self.selected = {item.nodeid for item in final}
        for item in final:
            if item.nodeid in self.items:
                self.honest[item.nodeid] = _honest_opt_out(item)

    def report(self, report: pytest.TestReport) -> None:
        """A setup, call or teardown report."""
        if report.nodeid in self.items:
            self.reports.setdefault(report.nodeid, {})[report.when] = report

    def _why_not(self, nodeid: str) -> tuple[str, bool] | None:
        """Why the test ``nodeid`` did not run its rule meaningfully: ``(why, partial)``,
        ``partial`` when it is a selection a partial run allows; ``None`` if it did."""
        if nodeid in self.deselected:
            return "deselected (-k, -m or a hook)", True
        if self.selected is not None and nodeid not in self.selected:
            return "removed from the run by a collection hook", False
        reports = self.reports.get(nodeid, {})
        setup = reports.get("setup")
        if setup is None:
            return "not reached: the session ended before it", False
        if setup.skipped:
            return f"skipped before it ran: {_skip_reason(setup)}", False
        if setup.failed:
            return "its setup failed", False
        call = reports.get("call")
        if call is None:
            return "not reached: the session ended before it", False
        rec = self.records.get(nodeid)
        if rec is None or rec[0] != self.items[nodeid][1]:
            return "the kit's rule never ran: the test was replaced or bypassed", False
        _, outcome, detail = rec
        xfailed = call.skipped and hasattr(call, "wasxfail")
        if outcome == "passed":
            if call.failed or call.passed:
                return None  # a pass, or a strict XPASS of an opt-out (a failure)
            return f"its rule passed but the test reports {call.outcome}", False
        if outcome == "failed":
            if call.failed:
                return None
            if xfailed and self.honest.get(nodeid) is not None:
                return None
            if xfailed:
                why = "its failure was hidden by an xfail that is not the documented opt-out"
                return f"{why}: {call.wasxfail}", False
            return f"its rule failed but the test reports {call.outcome}", False
        if outcome in ("kit-skip", "consequence"):
            return None if call.skipped else (f"{outcome} reported as {call.outcome}", False)
        if outcome == "foreign-skip":
            return f"skipped from inside the rule by code that is not the kit's: {detail}", False
        if outcome == "foreign-xfail":
            return f"xfailed from inside the rule by code that is not the kit's: {detail}", False
        return "interrupted", False

    def export(self) -> Export:
        """This session's account as plain data: what a pytest-xdist worker sends to the
        controller, which merges the workers' (:func:`merge`) and accounts once."""
        nodes: dict[str, NodeVerdict] = {}
        for nodeid, (class_id, req_id) in self.items.items():
            found = self._why_not(nodeid)
            reports = self.reports.get(nodeid, {})
            reason = self.honest.get(nodeid)
            call = reports.get("call")
            opted = found is None and reason is not None and call is not None and call.skipped
            nodes[nodeid] = {
                "class": class_id,
                "id": req_id,
                "ran": "setup" in reports,
                "why": None if found is None else found[0],
                "partial": found is not None and found[1],
                "opted_out": reason if opted else None,
            }
        classes = {cid: b.__name__ for cid, cls in self.classes.items() if (b := kit_base(cls))}
        return {"classes": classes, "nodes": nodes}

    def account(self) -> list[ClassAccount]:
        """Every provider test class's account, in collection order."""
        return accounts(self.export(), self.expected, partial_allowed=self.partial_allowed)


NodeVerdict = dict[str, str | bool | None]
"""One kit test's part of the account: its class, id, whether it ran here, why its rule
did not run meaningfully (``None``: it did), whether that is a partial selection, and
the reason of its honest opt-out."""

Export = dict[str, Any]
"""``{"classes": {class id: kit base name}, "nodes": {node id: NodeVerdict}}``."""


def merge(into: Export | None, other: Export) -> Export:
    """The account of two workers of one session: a test that ran on either counts as
    it did there (every worker collects every test but runs only its share)."""
    if into is None:
        return {"classes": dict(other["classes"]), "nodes": dict(other["nodes"])}
    into["classes"].update(other["classes"])
    for nodeid, node in other["nodes"].items():
        mine = into["nodes"].get(nodeid)
        if mine is None or (node["ran"] and not mine["ran"]):
            into["nodes"][nodeid] = node
    return into


def accounts(data: Export, expected: ExpectedIds, *, partial_allowed: bool) -> list[ClassAccount]:
    """Every provider test class's account from exported (or merged) data; ``expected``
    gives the ids each kit base owes (from the real base classes, never the data)."""
    out: list[ClassAccount] = []
    for class_id, base_name in data["classes"].items():
        account = ClassAccount(class_id, expected(base_name))
        by_id: dict[str, list[NodeVerdict]] = {}
        for node in data["nodes"].values():
            if node["class"] == class_id:
                by_id.setdefault(str(node["id"]), []).append(node)
        for req_id in account.ids:
            nodes = by_id.get(req_id, [])
            account.cases[req_id] = len(nodes)
            if not nodes:
                account.missing[req_id] = {"not collected": 1}
                continue
            for node in nodes:
                why = node["why"]
                if why is None:
                    if node["opted_out"] is not None:
                        account.opted_out[req_id] = str(node["opted_out"])
                    continue
                target = account.partial if node["partial"] and partial_allowed else account.missing
                whys = target.setdefault(req_id, {})
                whys[str(why)] = whys.get(str(why), 0) + 1
        out.append(account)
    return out


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
