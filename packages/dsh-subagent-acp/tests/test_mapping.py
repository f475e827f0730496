"""Pure decisions: stop-reason mapping and the unattended permission policy."""

from __future__ import annotations

import pytest
from acp.schema import PermissionOption
from dsh_subagent_acp.permissions import answer_permission
from dsh_subagent_acp.stop_reasons import map_stop_reason


@pytest.mark.parametrize(
    ("acp_reason", "expected"),
    [
        ("end_turn", "completed"),
        ("max_tokens", "max-tokens"),
        ("refusal", "refusal"),
        ("cancelled", "aborted"),
        ("max_turn_requests", "error"),
        ("something_new", "error"),
    ],
)
def test_stop_reason_mapping(acp_reason: str, expected: str) -> None:
    assert map_stop_reason(acp_reason) == expected


def test_cancelled_is_aborted_unlike_codex_interrupted() -> None:
    # Deliberate asymmetry (seed 003): ACP ``cancelled`` acknowledges the parent's
    # session/cancel, so it is ``aborted``; Codex ``interrupted`` is not parent-driven
    # and settles ``error``. Do not "harmonise" the two.
    assert map_stop_reason("cancelled") == "aborted"
    assert map_stop_reason("cancelled") != "error"


def _options(*pairs: tuple[str, str]) -> list[PermissionOption]:
    return [
        PermissionOption.model_validate({"optionId": oid, "name": oid, "kind": kind})
        for oid, kind in pairs
    ]


# Option ids are deliberately misleading: only ``kind`` may decide.
CODEX_LIKE = _options(
    ("approved", "allow_once"),
    ("approved-execpolicy-amendment", "allow_always"),
    ("abort", "reject_once"),
)
TRAPS = _options(
    ("reject", "allow_always"), ("allow", "reject_always"), ("reject_once", "allow_once")
)


def _selected(response: object) -> str | None:
    outcome = response.outcome  # type: ignore[attr-defined]
    return outcome.option_id if outcome.outcome == "selected" else None


def test_reject_selects_reject_once_by_kind() -> None:
    assert _selected(answer_permission("reject", CODEX_LIKE)) == "abort"


def test_reject_prefers_reject_once_over_reject_always() -> None:
    options = _options(("r-always", "reject_always"), ("r-once", "reject_once"))
    assert _selected(answer_permission("reject", options)) == "r-once"


def test_kind_not_option_id_decides() -> None:
    assert _selected(answer_permission("reject", TRAPS)) == "allow"
    assert _selected(answer_permission("allow", TRAPS)) == "reject_once"


def test_reject_without_reject_option_answers_cancelled() -> None:
    response = answer_permission(
        "reject", _options(("yes", "allow_once"), ("always", "allow_always"))
    )
    assert response.outcome.outcome == "cancelled"


def test_reject_with_no_options_answers_cancelled() -> None:
    assert answer_permission("reject", []).outcome.outcome == "cancelled"


def test_allow_prefers_allow_once() -> None:
    assert _selected(answer_permission("allow", CODEX_LIKE)) == "approved"


def test_allow_without_allow_option_falls_back_to_reject() -> None:
    options = _options(("no", "reject_once"))
    assert _selected(answer_permission("allow", options)) == "no"
    assert answer_permission("allow", []).outcome.outcome == "cancelled"
