"""Secret non-leak properties (hypothesis; ``DSH_HYPOTHESIS_PROFILE=nightly`` → ≥1000 examples).

Random secrets travel through the env overlay, the product's stderr, JSON-RPC error
messages and protocol payloads of a real Codex delegation against the scripted fake, and
through the Claude Code result mapping; none may reach a model-visible surface.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ResultMessage
from dsh_subagent import format_product_failure
from dsh_subagent_claude_code.failures import result_failure
from dsh_subagent_codex.error_info import map_error_info
from hypothesis import given
from hypothesis import strategies as st

from reliability.cells import Cell, Outcome
from reliability.fakes import FakeSetup
from reliability.planted import Planted
from reliability.profiles import Profile, current_profile
from reliability.runner import run_cell

pytestmark = pytest.mark.reliability

# Printable text without control characters (an env value cannot hold NUL) or surrogates.
_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=60)
# The random part is wrapped in a fixed fence so a secret can never be a substring of the
# fixed wording it is compared against ("Codex", "error", ...).
SECRETS = _TEXT.map(lambda text: f"⟦{text}⟧")


def _codex_with(secret: str, where: str) -> Any:
    def build(setup: FakeSetup, _profile: Profile) -> Any:
        handshake: list[dict[str, Any]] = [
            {"op": "expect", "method": "initialize"},
            {"op": "reply", "result": {"userAgent": secret, "codexHome": secret}},
            {"op": "expect", "method": "initialized"},
            {"op": "expect", "method": "thread/start"},
        ]
        if where == "startup":
            return setup.codex(
                [
                    *handshake,
                    {"op": "stderr", "data": secret + "\n"},
                    {"op": "reply_error", "code": -32000, "message": secret},
                ]
            )
        error = {"message": secret, "codexErrorInfo": secret, "additionalDetails": secret}
        return setup.codex(
            [
                *handshake,
                {"op": "reply", "result": {"thread": {"id": "t", "ephemeral": True}}},
                {"op": "expect", "method": "turn/start"},
                {
                    "op": "reply",
                    "result": {"turn": {"id": "u", "status": "inProgress", "items": []}},
                },
                {"op": "stderr", "data": secret + "\n"},
                {
                    "op": "send",
                    "frame": {
                        "method": "turn/completed",
                        "params": {
                            "threadId": "t",
                            "turn": {"id": "u", "status": "failed", "error": error, "items": []},
                        },
                    },
                },
            ]
        )

    return build


@given(secret=SECRETS, where=st.sampled_from(["startup", "turn"]))
def test_random_secret_never_reaches_the_model_through_codex(secret: str, where: str) -> None:
    outcome = (
        Outcome("start-error", "thread-start", "unknown")
        if where == "startup"
        else Outcome("error", "turn", "unknown")
    )
    cell = Cell("codex", "random-secret", where, _codex_with(secret, where), (outcome,))
    planted = Planted(env=secret)  # the env secret doubles as every payload's secret

    async def main() -> None:
        with tempfile.TemporaryDirectory() as root:
            report = await run_cell(cell, Path(root), current_profile(), planted=planted)
        assert report.passed, report.explain()

    anyio.run(main)


@given(
    secret=SECRETS,
    subtype=st.one_of(SECRETS, st.sampled_from(["error_during_execution", "success"])),
)
def test_claude_result_mapping_never_copies_product_text(secret: str, subtype: str) -> None:
    message = ResultMessage(
        subtype=subtype,
        duration_ms=1,
        duration_api_ms=1,
        is_error=True,
        num_turns=1,
        session_id=secret,
        stop_reason=secret,
        result=secret,
        errors=[secret, secret],
    )
    diagnostic = format_product_failure(result_failure(message))
    assert secret not in diagnostic
    if subtype == "error_during_execution":  # a known SDK subtype is kept exactly
        assert "category: error_during_execution" in diagnostic


@given(
    value=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), SECRETS),
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(SECRETS, children, max_size=2)
        ),
        max_leaves=6,
    )
)
def test_codex_error_info_mapping_never_copies_unknown_values(value: Any) -> None:
    category = map_error_info(value)
    rendered = f"{category.category} {category.http_status}"
    assert "⟦" not in rendered
