"""Secret non-leak properties (hypothesis; ``DSH_HYPOTHESIS_PROFILE=nightly`` → ≥1000 examples).

Random secrets travel through the env overlay, the product's stderr, JSON-RPC error
messages and protocol payloads of a real Codex delegation against the scripted fake, and
through the Claude Code result mapping; none may reach a model-visible surface. For
Codex and ACP, secrets in the product fields a provider does not report never reach the
run's progress either (see the section at the end).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ResultMessage
from dsh_subagent import (
    ParentContext,
    SubagentProvider,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    format_product_failure,
)
from dsh_subagent_claude_code.failures import result_failure
from dsh_subagent_codex.error_info import map_error_info
from hypothesis import given, settings
from hypothesis import strategies as st

from reliability.cells import Cell, Outcome
from reliability.fakes import FakeSetup
from reliability.planted import Planted, find_leaks
from reliability.profiles import Profile, current_profile
from reliability.runner import run_cell

pytestmark = pytest.mark.reliability

# Printable text without control characters (an env value cannot hold NUL) or surrogates.
_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=60)
# The random part is wrapped in a fixed fence so a secret can never be a substring of the
# fixed wording it is compared against ("Codex", "error", ...).
SECRETS = _TEXT.map(lambda text: f"⟦{text}⟧")
# Each example of these two spawns a product process (seconds each for the ACP agent):
# a quarter of the profile's example budget keeps the default run short while the
# nightly profile still tries hundreds.
SPAWNING = settings(max_examples=max(10, settings().max_examples // 4))


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


@SPAWNING
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


# -- progress --------------------------------------------------------------------------
#
# Progress carries product text by design (assistant text, tool names, paths, opted-in
# commands), so it is not a model-visible surface. The property here is narrower: a
# planted secret that the product puts only into fields the provider does not report
# (command text without the opt-in, command output, working directories, diffs, error
# and warning text, reasoning, echoed user messages, tool titles, raw tool input and
# output) never appears in any progress event, and the env overlay never leaks into it.


async def _progress_of(provider: SubagentProvider, workspace: Path, prompt: str) -> list[str]:
    """Every progress event of one delegation as JSON, after checking it completed."""
    events: list[str] = []
    request = SubagentStartRequest(
        prompt=(TextBlock(text=prompt),),
        parent=ParentContext(session_id="s", cwd=str(workspace)),
    )
    with anyio.fail_after(60):
        async with SubagentService() as service:
            service.register_provider(provider)
            run = await service.start(provider.name, request)
            try:
                events.extend([event.model_dump_json() async for event in run.progress])
                result = await run.result()
            finally:
                await run.dispose()
    assert (result.stop_reason, result.text) == ("completed", "the answer"), result
    return events


def _notify(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"op": "send", "frame": {"method": method, "params": params}}


def _codex_progress_steps(secret: str) -> list[dict[str, Any]]:
    scope = {"threadId": "t", "turnId": "u"}
    command = {
        "type": "commandExecution",
        "id": "c1",
        "command": secret,
        "commandActions": [{"type": "unknown", "command": secret}],
        "cwd": secret,
        "status": "inProgress",
    }
    done = {**command, "status": "completed", "aggregatedOutput": secret, "exitCode": 0}
    patch = {
        "type": "fileChange",
        "id": "f1",
        "changes": [{"path": "/w/file.txt", "kind": {"type": "add"}, "diff": secret}],
        "status": "completed",
    }
    user = {"type": "userMessage", "id": "m0", "content": [{"type": "text", "text": secret}]}
    reasoning = {"type": "reasoning", "id": "r1", "summary": [secret], "content": [secret]}
    usage = {
        "inputTokens": 9,
        "cachedInputTokens": 0,
        "outputTokens": 1,
        "reasoningOutputTokens": 0,
        "totalTokens": 10,
    }
    return [
        {"op": "expect", "method": "initialize"},
        {"op": "reply", "result": {"userAgent": secret, "codexHome": secret}},
        {"op": "expect", "method": "initialized"},
        {"op": "expect", "method": "thread/start"},
        {"op": "reply", "result": {"thread": {"id": "t", "ephemeral": True}}},
        {"op": "expect", "method": "turn/start"},
        {"op": "reply", "result": {"turn": {"id": "u", "status": "inProgress", "items": []}}},
        _notify("turn/started", {"threadId": "t", "turn": {"id": "u", "items": []}}),
        _notify("item/completed", {**scope, "item": user}),
        _notify("item/started", {**scope, "item": command}),
        _notify("item/commandExecution/outputDelta", {**scope, "itemId": "c1", "delta": secret}),
        _notify("item/completed", {**scope, "item": done}),
        _notify("item/completed", {**scope, "item": patch}),
        _notify("item/completed", {**scope, "item": reasoning}),
        _notify("item/reasoning/summaryTextDelta", {**scope, "itemId": "r1", "delta": secret}),
        _notify("turn/diff/updated", {**scope, "diff": secret}),
        _notify("warning", {"threadId": "t", "message": secret}),
        _notify("turn/plan/updated", {**scope, "explanation": secret, "plan": []}),
        _notify("thread/tokenUsage/updated", {**scope, "tokenUsage": {"total": usage}}),
        _notify(
            "item/completed",
            {
                **scope,
                "item": {
                    "type": "agentMessage",
                    "id": "m1",
                    "text": "the answer",
                    "phase": "final_answer",
                },
            },
        ),
        _notify("turn/completed", {"threadId": "t", "turn": {"id": "u", "status": "completed"}}),
    ]


@given(secret=SECRETS)
def test_random_secret_in_unreported_codex_fields_never_reaches_progress(secret: str) -> None:
    planted = Planted(env=secret)

    async def main() -> None:
        with tempfile.TemporaryDirectory() as root:
            setup = FakeSetup(Path(root), planted)
            provider = setup.codex(_codex_progress_steps(secret))
            events = await _progress_of(provider, setup.workspace, planted.prompt())
        kinds = [json.loads(event)["kind"] for event in events]
        assert {"turn-started", "tool-started", "tool-finished", "file-changed"} <= set(kinds)
        assert {"plan-updated", "usage-updated", "assistant-text"} <= set(kinds)
        assert find_leaks(planted, {"progress": "\n".join(events)}) == []

    anyio.run(main)


def _acp_progress_script(secret: str) -> dict[str, Any]:
    text = {"type": "content", "content": {"type": "text", "text": secret}}
    updates: list[dict[str, Any]] = [
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": secret}},
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": secret}},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": secret,
            "kind": "execute",
            "status": "in_progress",
            "rawInput": {"command": secret},
            "content": [text],
            "locations": [{"path": secret}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "title": secret,
            "rawOutput": {"stdout": secret},
            "content": [text],
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c2",
            "title": secret,
            "kind": "read",
            "status": "completed",
            "locations": [{"path": secret}],
        },
        {
            "sessionUpdate": "plan_update",
            "plan": {"type": "markdown", "planId": "p", "content": secret},
        },
        {
            "sessionUpdate": "usage_update",
            "used": 5,
            "size": 10,
            "cost": {"amount": 0.5, "currency": secret},
        },
        {"sessionUpdate": "session_info_update", "title": secret},
        {
            "sessionUpdate": "plan",
            "entries": [{"content": "step", "status": "pending", "priority": "low"}],
        },
    ]
    return {
        "prompt": [*({"update": update} for update in updates), {"chunk": "the answer"}],
        "usage": {"totalTokens": 3, "inputTokens": 2, "outputTokens": 1},
    }


@SPAWNING
@given(secret=SECRETS)
def test_random_secret_in_unreported_acp_fields_never_reaches_progress(secret: str) -> None:
    planted = Planted(env=secret)

    async def main() -> None:
        with tempfile.TemporaryDirectory() as root:
            setup = FakeSetup(Path(root), planted)
            provider = setup.acp(_acp_progress_script(secret))
            events = await _progress_of(provider, setup.workspace, planted.prompt())
        kinds = [json.loads(event)["kind"] for event in events]
        assert {"tool-started", "tool-finished", "plan-updated", "usage-updated"} <= set(kinds)
        assert "assistant-text" in kinds
        assert find_leaks(planted, {"progress": "\n".join(events)}) == []

    anyio.run(main)
