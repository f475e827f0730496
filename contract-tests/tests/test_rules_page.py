"""``docs/rules.md`` and the kit's manifest agree, in both directions.

Every manifest id has one section on the page, headed by the id with the anchor its
``doc`` names, stating the manifest's rule sentence word for word, its tier and the kit
tests that carry the id; every id on the page is in the manifest; the provenance table
covers every id once. The page is hand-written (it explains each rule in prose), so this
check is what keeps it honest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from dsh_contract_tests import REQUIREMENTS, CredentialedProviderContract, ProviderContract
from dsh_contract_tests.manifest import REQUIREMENT_MARKER, RULES_PAGE, Requirement

PAGE = Path(__file__).resolve().parents[2] / RULES_PAGE

_HEADING = re.compile(r"^### `(?P<id>[^`]+)` \{#(?P<anchor>[^}]+)\}$")
_RULE = re.compile(r"^\*\*Rule:\*\* (?P<rule>.+)$")
_META = re.compile(r"^Tier: `(?P<tier>[a-z]+)` · Kit tests?: (?P<tests>.+)$")
_PROVENANCE_ROW = re.compile(r"^\| `(?P<id>[a-z]+:[a-z0-9-]+)` \|")


def _kit_tests_by_id() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kit in (ProviderContract, CredentialedProviderContract):
        for name, func in vars(kit).items():
            if name.startswith("test_") and callable(func):
                for mark in getattr(func, "pytestmark", []):
                    if mark.name == REQUIREMENT_MARKER:
                        found.setdefault(str(mark.args[0]), []).append(f"{kit.__name__}.{name}")
    return found


def rules_page_problems(
    text: str, manifest: Mapping[str, Requirement], kit_tests: Mapping[str, list[str]]
) -> list[str]:
    """Every disagreement between a rules page and the manifest (empty when they agree)."""
    problems: list[str] = []
    sections: dict[str, list[str]] = {}
    anchors: dict[str, str] = {}
    order: list[str] = []
    provenance: list[str] = []
    current: list[str] | None = None
    in_provenance = False
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            req_id = heading["id"]
            if req_id in sections:
                problems.append(f"{req_id}: more than one section")
            current = sections.setdefault(req_id, [])
            anchors[req_id] = heading["anchor"]
            order.append(req_id)
        elif line.startswith("## "):
            current = None
            in_provenance = line == "## Provenance"
        elif current is not None:
            current.append(line)
        elif in_provenance and (row := _PROVENANCE_ROW.match(line)):
            provenance.append(row["id"])
    for req_id in manifest.keys() - sections.keys():
        problems.append(f"{req_id}: in the manifest, missing from the page")
    for req_id in sections.keys() - manifest.keys():
        problems.append(f"{req_id}: on the page, not in the manifest")
    if [i for i in order if i in manifest] != [i for i in manifest if i in sections]:
        problems.append("the page lists the ids in another order than the manifest")
    for req_id, lines in sections.items():
        req = manifest.get(req_id)
        if req is None:
            continue
        if anchors[req_id] != req.anchor or req.doc != f"{RULES_PAGE}#{anchors[req_id]}":
            problems.append(f"{req_id}: anchor {anchors[req_id]!r}, manifest doc {req.doc!r}")
        rules = [m["rule"] for ln in lines if (m := _RULE.match(ln))]
        if rules != [req.rule]:
            problems.append(f"{req_id}: rule on the page {rules!r} is not the manifest's")
        metas = [m for ln in lines if (m := _META.match(ln))]
        if len(metas) != 1:
            problems.append(f"{req_id}: expected one 'Tier: … · Kit test: …' line")
            continue
        if metas[0]["tier"] != req.tier:
            problems.append(f"{req_id}: tier {metas[0]['tier']!r}, manifest {req.tier!r}")
        listed = sorted(re.findall(r"`([A-Za-z]+\.test_\w+)`", metas[0]["tests"]))
        if listed != sorted(kit_tests.get(req_id, [])):
            problems.append(f"{req_id}: kit tests {listed}, kit {kit_tests.get(req_id)}")
    if sorted(provenance) != sorted(manifest):
        problems.append(f"provenance rows {sorted(provenance)} are not the manifest's ids")
    return problems


def test_rules_page_agrees_with_the_manifest() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert rules_page_problems(text, REQUIREMENTS, _kit_tests_by_id()) == []


def _section(text: str, req_id: str) -> str:
    start = text.index(f"### `{req_id}`")
    end = text.index("\n### ", start + 1)
    return text[start : end + 1]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda t: t.replace(_section(t, "cwd:parent-session"), ""), "cwd:parent-session: in"),
        (
            lambda t: t.replace("### `lifecycle:paired`", "### `lifecycle:made-up`"),
            "lifecycle:made-up: on the page",
        ),
        (
            lambda t: t.replace("no lifecycle event, no process.", "no process.", 1),
            "capability:refused-before-start: rule",
        ),
        (
            lambda t: t.replace("{#diagnostic-bounded}", "{#diagnostic:bounded}"),
            "diagnostic:bounded: anchor",
        ),
        (
            lambda t: t.replace("Tier: `loader`", "Tier: `keyless`"),
            "loader:entry-point-starts-nothing: tier",
        ),
        (
            lambda t: t.replace("| `kit:no-silent-opt-out` | the kit", "| kit | the kit"),
            "provenance rows",
        ),
    ],
    ids=["section-removed", "unknown-id", "rule-changed", "anchor", "tier", "provenance"],
)
def test_a_disagreement_is_reported(mutate: Callable[[str], str], expected: str) -> None:
    text = PAGE.read_text(encoding="utf-8")
    changed = mutate(text)
    assert changed != text, "the mutation did not apply"
    problems = rules_page_problems(changed, REQUIREMENTS, _kit_tests_by_id())
    assert any(p.startswith(expected) for p in problems), problems
