"""The manifest and the kit's tests cover each other, in both directions."""

from __future__ import annotations

import re

import pytest
from dsh_contract_tests import REQUIREMENTS, CredentialedProviderContract, ProviderContract
from dsh_contract_tests.manifest import REQUIREMENT_MARKER

_KITS = (ProviderContract, CredentialedProviderContract)


def _kit_tests() -> dict[str, list[str]]:
    """``"Kit.test_name"`` → the requirement ids its marks name."""
    found: dict[str, list[str]] = {}
    for kit in _KITS:
        for name, func in vars(kit).items():
            if name.startswith("test_") and callable(func):
                marks = getattr(func, "pytestmark", [])
                found[f"{kit.__name__}.{name}"] = [
                    str(m.args[0]) for m in marks if m.name == REQUIREMENT_MARKER
                ]
    return found


def test_every_kit_test_names_exactly_one_known_requirement() -> None:
    for test, ids in _kit_tests().items():
        assert len(ids) == 1, f"{test} names {ids}"
        assert ids[0] in REQUIREMENTS, f"{test} names unknown id {ids[0]}"


def test_every_requirement_has_a_kit_test() -> None:
    covered = {ids[0] for ids in _kit_tests().values() if ids}
    assert set(REQUIREMENTS) - covered == set()


def test_one_test_per_rule() -> None:
    # The guard id is shared by the two base classes' guard tests; every other id has one test.
    by_id: dict[str, list[str]] = {}
    for test, ids in _kit_tests().items():
        by_id.setdefault(ids[0], []).append(test)
    shared = {i: t for i, t in by_id.items() if len(t) > 1}
    assert set(shared) == {"kit:no-silent-opt-out"}


def test_requirements_are_well_formed() -> None:
    for req_id, req in REQUIREMENTS.items():
        assert req.id == req_id
        assert re.fullmatch(r"[a-z]+:[a-z0-9-]+", req_id)
        assert req.rule.strip()
        assert req.doc == f"docs/rules.md#{req_id.replace(':', '-')}"


def test_requirement_carries_its_tier_marker() -> None:
    for kit in _KITS:
        for name, func in vars(kit).items():
            if not name.startswith("test_"):
                continue
            marks = {m.name: m for m in getattr(func, "pytestmark", [])}
            req = REQUIREMENTS[str(marks[REQUIREMENT_MARKER].args[0])]
            assert req.tier in marks, f"{kit.__name__}.{name} lacks the {req.tier} marker"


def test_unknown_requirement_id_is_refused_at_import() -> None:
    from dsh_contract_tests import requirement

    with pytest.raises(KeyError):
        requirement("capability:made-up")


def test_readme_lists_every_requirement_with_its_rule() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"{len(REQUIREMENTS)} ids" in readme
    for req in REQUIREMENTS.values():
        assert f"| `{req.id}` | {req.tier} | {req.rule} |" in readme
