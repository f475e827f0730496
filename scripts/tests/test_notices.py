"""The notices generator and the fail-closed license policy, fed crafted locks."""

from __future__ import annotations

from collections.abc import Mapping

import notices
import pytest

LOCK = """
version = 1
[manifest]
members = ["dsh-a", "dsh-workspace"]

[[package]]
name = "dsh-a"
version = "0.1.0"
dependencies = [{ name = "libfree" }, { name = "product" }]

[[package]]
name = "dsh-workspace"
version = "0.1.0"
dependencies = [{ name = "dsh-a" }]
[package.dev-dependencies]
dev = [{ name = "devtool" }]

[[package]]
name = "libfree"
version = "1.0"
dependencies = [{ name = "{transitive}" }]

[[package]]
name = "{transitive}"
version = "2.0"

[[package]]
name = "product"
version = "3.0"

[[package]]
name = "devtool"
version = "4.0"
"""


def _lock(transitive: str = "deep") -> str:
    return LOCK.replace("{transitive}", transitive)


def _meta(licenses: Mapping[str, str | None]) -> notices.MetadataLookup:
    def lookup(name: str) -> Mapping[str, object] | None:
        if name not in licenses:
            return None
        return {"License-Expression": licenses[name], "License": None, "Classifier": []}

    return lookup


def _no_payloads(name: str) -> frozenset[str] | None:
    return None


BASE = {"libfree": "MIT", "deep": "BSD-3-Clause", "product": "MIT", "devtool": "GPL-3.0-only"}


def _report(licenses: Mapping[str, str | None], lock: str | None = None) -> notices.Report:
    return notices.build_report(lock or _lock(), _meta(licenses), reviews={}, payloads=_no_payloads)


def test_permissive_closure_passes_and_dev_only_copyleft_is_not_gated() -> None:
    report = _report(BASE)
    assert report.violations == ()
    text: str = report.text
    assert "| deep | 2.0 | BSD-3-Clause | License-Expression | permissive | dsh-a |" in text
    assert "| devtool | 4.0 | GPL-3.0-only | License-Expression |" in text


def test_transitive_strong_copyleft_runtime_dependency_fails_closed() -> None:
    report = _report({**BASE, "deep": "GPL-3.0-only"})
    assert report.violations == ("deep 2.0: GPL-3.0-only is not permissive",)


def test_unknown_license_fails_closed() -> None:
    report = _report({k: v for k, v in BASE.items() if k != "libfree"})
    assert report.violations == ("libfree 1.0: license unknown (not installed)",)


def test_review_pinned_to_another_version_does_not_apply() -> None:
    licenses = {**BASE, "libfree": None}
    reviews = {"libfree": {"version": "0.9", "expression": "MIT", "evidence": "old"}}
    stale = notices.build_report(_lock(), _meta(licenses), reviews=reviews, payloads=_no_payloads)
    assert len(stale.violations) == 1
    assert "libfree" in stale.violations[0]
    reviews["libfree"]["version"] = "1.0"
    fresh = notices.build_report(_lock(), _meta(licenses), reviews=reviews, payloads=_no_payloads)
    assert fresh.violations == ()


def test_authorised_product_passes_and_discloses_payload_terms() -> None:
    lock = (
        _lock()
        .replace('name = "product"', 'name = "claude-agent-sdk"')
        .replace('{ name = "product" }', '{ name = "claude-agent-sdk" }')
    )
    licenses = {**BASE, "claude-agent-sdk": "MIT"}
    report = notices.build_report(
        lock,
        _meta(licenses),
        reviews={},
        payloads=lambda name: frozenset({"claude_agent_sdk/_bundled/claude"}),
    )
    assert report.violations == ()
    assert "NOT covered by the SDK's MIT license" in report.text
    assert "authorised product identity" in report.text


def test_changed_payload_set_requires_review() -> None:
    lock = (
        _lock()
        .replace('name = "product"', 'name = "claude-agent-sdk"')
        .replace('{ name = "product" }', '{ name = "claude-agent-sdk" }')
    )
    report = notices.build_report(
        lock,
        _meta({**BASE, "claude-agent-sdk": "MIT"}),
        reviews={},
        payloads=lambda name: frozenset({"claude_agent_sdk/_bundled/claude", "x/new-helper"}),
    )
    assert report.violations == (
        "claude-agent-sdk: payload set changed, review required: x/new-helper",
    )


def test_stale_committed_notices_fail_the_check() -> None:
    report = _report(BASE)
    notices.check(report, report.text)  # fresh: no error
    with pytest.raises(notices.PolicyError, match="stale"):
        notices.check(report, report.text + "edited by hand\n")


@pytest.mark.parametrize(
    ("expression", "allowed"),
    [
        ("MIT", True),
        ("MIT OR GPL-3.0-only", True),
        ("MIT AND GPL-3.0-only", False),
        ("(MIT OR GPL-3.0-only) AND Apache-2.0", True),
        ("GPL-2.0-only WITH Classpath-exception-2.0", False),
        ("Apache-2.0 WITH LLVM-exception", True),
    ],
)
def test_spdx_expression_evaluation(expression: str, allowed: bool) -> None:
    assert notices.expression_allowed(expression, notices.PERMISSIVE) is allowed


def test_committed_notices_match_the_lock() -> None:
    """The repository's own notices are current and its runtime closure passes the policy."""
    report = notices.build_report((notices.ROOT / "uv.lock").read_text(encoding="utf-8"))
    committed = notices.NOTICES.read_text(encoding="utf-8")
    notices.check(report, committed)
