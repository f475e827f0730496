"""How the verify parent judges one rule's child from its evidence alone.

A rule passes only when every collected case began and ended passed on the evidence
channel, pytest in the child agrees (exit status 0) and nothing of its tree outlived it;
a consequence counts only when the owning rule failed in its own child. Each case is the
evidence a tampered or broken child would leave.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsh_contract_tests.verify import RuleVerdict, _Child, _judge, _resolve_consequences

_RULE = "settlement:completed"
_NODES = ("m.py::T::test_x[asyncio]", "m.py::T::test_x[trio]")


def _records(*ends: tuple[str, str, str]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [{"event": "collected", "node": n} for n in _NODES]
    for node, outcome, detail in ends:
        records.append({"event": "begin", "node": node, "id": _RULE})
        records.append(
            {"event": "end", "node": node, "id": _RULE, "outcome": outcome, "detail": detail}
        )
    return records


def _both(outcome: str, detail: str = "") -> list[dict[str, Any]]:
    return _records(*((node, outcome, detail) for node in _NODES))


def test_every_case_passed_and_pytest_agrees_is_a_pass() -> None:
    verdict = _judge(_RULE, _Child(0, _both("passed"), "", []), 600.0)
    assert (verdict.outcome, verdict.detail) == ("passed", "")


@pytest.mark.parametrize(
    ("child", "detail"),
    [
        (
            _Child(0, _records((_NODES[0], "passed", "")), "", []),
            "no evidence that the kit's rule ran to its end for every case: 2 collected, "
            "1 begun, 1 ended (pytest exit status 0)",
        ),
        (
            _Child(1, _both("passed"), "", []),
            "every case of the rule reported an outcome of its own, but pytest in the rule's "
            "process exited 1",
        ),
        (
            _Child(0, _both("passed"), "", ["4242 (sleep) sleep 3600"]),
            "processes outlived the rule's run (seen by the verify parent): "
            "4242 (sleep) sleep 3600",
        ),
        (_Child(None, [], "", []), "the rule's run did not end within 600 s; the kit killed it"),
        (
            _Child(0, _both("failed", "id — rule\nObserved: it broke\nRule: x"), "", []),
            "Observed: it broke",
        ),
        (_Child(0, _both("foreign-skip", "mine"), "", []), "the rule did not run: foreign-skip"),
    ],
    ids=["a case never ran", "pytest disagrees", "leftover", "timeout", "failed", "skip"],
)
def test_missing_or_contrary_evidence_fails_the_rule(child: _Child, detail: str) -> None:
    verdict = _judge(_RULE, child, 600.0)
    assert verdict.outcome == "failed", verdict
    assert verdict.detail.startswith(detail), verdict.detail


def test_a_consequence_counts_only_when_its_owner_failed_in_its_own_child() -> None:
    claim = "consequence of quiescence:after-dispose (its own test fails): left"
    judged = _judge(_RULE, _Child(0, _both("consequence", claim), "", []), 600.0)
    assert (judged.outcome, judged.detail) == ("consequence", "quiescence:after-dispose")
    owner_failed = [RuleVerdict("quiescence:after-dispose", "failed"), judged]
    _resolve_consequences(owner_failed)
    assert judged.outcome == "consequence"
    again = _judge(_RULE, _Child(0, _both("consequence", claim), "", []), 600.0)
    owner_passed = [RuleVerdict("quiescence:after-dispose", "passed"), again]
    _resolve_consequences(owner_passed)
    assert again.outcome == "failed"
    assert again.detail == (
        "ended as a consequence of quiescence:after-dispose, but that rule's own run did not fail"
    )
