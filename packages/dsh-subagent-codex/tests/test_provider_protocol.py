"""The published turn against the scripted fake app-server: wire, answers, terminals."""

from __future__ import annotations

import os
import sys

import pytest
from codex_harness import (
    SECRET,
    THREAD,
    TURN,
    FakeCodex,
    Step,
    agent_message,
    answered,
    delegate,
    failed,
    handshake,
    item,
    notify,
    terminal,
    turn_start,
)
from dsh_subagent import ConfinementSetting
from dsh_subprocess import landlock_abi

pytestmark = pytest.mark.anyio

OFF = ConfinementSetting(mode="off")


async def test_success_returns_the_answer_byte_for_byte(fake: FakeCodex) -> None:
    answer = "  line one\nline two ✓\n\n"
    provider = fake.provider(answered(text=answer))
    result, run = await delegate(provider, fake.workspace, prompt=["first block", "second"])
    assert result.stop_reason == "completed"
    assert result.text == answer
    assert result.diagnostic is None
    assert run.id not in (THREAD, TURN)
    assert run.local_agent is None


async def test_wire_frames_are_exact(fake: FakeCodex) -> None:
    # The fake ignores SIGTERM so it logs every frame it gets before exiting on stdin EOF.
    # Unconfined: a confined thread replaces Codex's sandbox (pinned below).
    provider = fake.provider([{"op": "ignore_term"}, *answered()], confinement=OFF)
    await delegate(provider, fake.workspace, prompt=["first block", "second"])
    frames = fake.frames()
    methods = [f.get("method") for f in frames]
    assert methods[:4] == ["initialize", "initialized", "thread/start", "turn/start"]
    initialize = frames[0]
    assert initialize["jsonrpc"] == "2.0"
    assert initialize["id"].startswith("req_")
    assert len(initialize["id"]) == 36
    assert initialize["params"] == {
        "clientInfo": {"name": "dsh-python", "title": "DSH Python", "version": "0.1.0"},
        "capabilities": {"experimentalApi": False, "requestAttestation": False},
    }
    assert frames[1] == {"jsonrpc": "2.0", "method": "initialized"}  # no params key at all
    assert frames[2]["params"] == {
        "cwd": str(fake.workspace),
        "ephemeral": True,
        "approvalPolicy": "never",
    }
    assert frames[3]["params"] == {
        "threadId": THREAD,
        "input": [
            {"type": "text", "text": "first block", "text_elements": []},
            {"type": "text", "text": "second", "text_elements": []},
        ],
    }
    # A completed turn is not interrupted at disposal: only a run stopped early is.
    assert methods[4:] == []
    started = fake.records()[0]
    assert started["cwd"] == str(fake.workspace)


@pytest.mark.parametrize(
    ("mode", "fields"),
    [
        ("never", {"approvalPolicy": "never"}),
        (
            "approve-for-me",
            {
                "approvalPolicy": "on-request",
                "approvalsReviewer": "auto_review",
                "sandbox": "workspace-write",
            },
        ),
        (
            "dangerously-bypass-approvals-and-sandbox",
            {"approvalPolicy": "never", "sandbox": "danger-full-access"},
        ),
    ],
)
async def test_thread_start_carries_the_mode_fields_and_optional_model(
    fake: FakeCodex, mode: str, fields: dict[str, str]
) -> None:
    await delegate(fake.provider(answered(), permission_mode=mode, confinement=OFF), fake.workspace)
    await delegate(
        fake.provider(answered(), permission_mode=mode, model="m-x", confinement=OFF),
        fake.workspace,
    )
    without, with_model = (fake.sent("thread/start", i)[0]["params"] for i in (0, 1))
    assert without == {"cwd": str(fake.workspace), "ephemeral": True, **fields}
    assert with_model == {**without, "model": "m-x"}


@pytest.mark.skipif(landlock_abi() == 0, reason="this kernel offers no Landlock")
@pytest.mark.parametrize(
    "mode", ["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]
)
async def test_a_confined_thread_runs_commands_in_the_kernel_sandbox(
    fake: FakeCodex, mode: str
) -> None:
    # Codex's bubblewrap sandbox cannot start inside a Landlock domain: a confined run asks
    # for none, and the kernel policy (read-only cwd in never mode) is the sandbox.
    await delegate(fake.provider(answered(), permission_mode=mode), fake.workspace)
    assert fake.sent("thread/start", 0)[0]["params"]["sandbox"] == "danger-full-access"


async def test_argv_carries_no_task_model_or_mode(fake: FakeCodex) -> None:
    provider = fake.provider(answered(), model="secret-model", permission_mode="approve-for-me")
    await delegate(provider, fake.workspace, prompt=["TASK-TEXT-IN-ARGV?"])
    argv = fake.records()[0]["argv"]
    assert not any(
        marker in arg for arg in argv for marker in ("TASK-TEXT", "secret-model", "approve-for-me")
    )


async def test_env_overlay_reaches_the_child_and_ambient_secrets_do_not(
    fake: FakeCodex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMBIENT_API_KEY", SECRET)
    monkeypatch.setenv("INHERITED_PLAIN", "kept")
    provider = fake.provider(
        answered(),
        env={
            "FAKE_ENV_PROBE": "AMBIENT_API_KEY,EXPLICIT_API_KEY,INHERITED_PLAIN,REMOVED",
            "EXPLICIT_API_KEY": "given",
            "REMOVED": None,
        },
    )
    monkeypatch.setenv("REMOVED", "should-go")
    await delegate(provider, fake.workspace)
    env = next(r["env"] for r in fake.records() if r.get("event") == "env")
    assert env == {
        "AMBIENT_API_KEY": None,
        "EXPLICIT_API_KEY": "given",
        "INHERITED_PLAIN": "kept",
        "REMOVED": None,
    }


async def test_configured_cwd_overrides_the_parent(fake: FakeCodex) -> None:
    other = fake.root / "configured"
    other.mkdir()
    await delegate(fake.provider(answered(), cwd=str(other)), fake.workspace)
    assert fake.records()[0]["cwd"] == str(other)
    assert fake.sent("thread/start")[0]["params"]["cwd"] == str(other)


# -- final-answer selection ---------------------------------------------------------------


async def test_latest_final_answer_wins_over_unphased_commentary_and_foreign_frames(
    fake: FakeCodex,
) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        agent_message("unphased", None),
        agent_message("first final", "final_answer"),
        agent_message("commentary later", "commentary"),
        agent_message("other turn", "final_answer", turn="turn-9"),
        agent_message("other thread", "final_answer", thread="thr-9"),
        notify(
            "item/completed", {"threadId": THREAD, "turnId": TURN, "item": {"type": "reasoning"}}
        ),
        agent_message("last final", "final_answer"),
        agent_message("unphased after", None),
        notify("future/notification", {"anything": SECRET}),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", "last final")


async def test_partial_answer_phase_is_legal_but_never_answers(fake: FakeCodex) -> None:
    # The pinned schema adds partial_answer ("may be followed by more output"): it is
    # not fatal like an unknown phase, and like commentary it never becomes the answer.
    steps = [
        *handshake(),
        *turn_start(),
        agent_message("unphased", None),
        agent_message("partial", "partial_answer"),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", "unphased")


async def test_unphased_answer_is_the_fallback(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        agent_message("older", None),
        agent_message("newer", None),
        agent_message("thinking", "commentary"),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.text == "newer"


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [agent_message("only commentary", "commentary")],
        [agent_message("   \n", "final_answer")],
        # A blank final answer does not fall back to an earlier unphased answer.
        [agent_message("unphased", None), agent_message(" ", "final_answer")],
    ],
    ids=["none", "commentary-only", "blank-final", "blank-final-after-unphased"],
)
async def test_completed_without_an_answer_is_an_error(
    fake: FakeCodex, messages: list[dict[str, object]]
) -> None:
    steps = [*handshake(), *turn_start(), *messages, terminal()]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: unknown)"
    )


@pytest.mark.parametrize(
    "bad",
    [
        agent_message(42, "final_answer"),
        agent_message("x", omit_phase=True),
        agent_message("x", "shouting"),
        terminal("inProgress"),
        notify("turn/completed", None),
        notify("item/completed", {"threadId": "", "turnId": TURN, "item": {}}),
    ],
    ids=[
        "non-string-text",
        "missing-phase",
        "unknown-phase",
        "non-terminal",
        "null-params",
        "blank-thread",
    ],
)
async def test_invalid_consumed_shapes_fail_the_turn(
    fake: FakeCodex, bad: dict[str, object]
) -> None:
    steps = [*handshake(), *turn_start(), agent_message("partial", None), bad, terminal()]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: unknown)"
    )
    assert result.text == "partial"  # Codex keeps the partial selection on error


async def test_unparseable_and_foreign_lines_are_ignored(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        {"op": "write", "data": 'not json at all\n[1,2,3]\n\n   \n{"method": 7}\n'},
        {"op": "send", "frame": {"id": "unknown-response-id", "result": {}}},
        agent_message("fine", "final_answer"),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", "fine")


async def test_frames_before_turn_start_are_out_of_window(fake: FakeCodex) -> None:
    steps: list[Step] = [
        {"op": "expect", "method": "initialize"},
        {"op": "reply", "result": {}},
        terminal("failed", {"codexErrorInfo": "other"}),
        {"op": "expect", "method": "thread/start"},
        agent_message("stale", "final_answer"),
        {"op": "reply", "result": {"thread": {"id": THREAD, "ephemeral": True}}},
        terminal("failed", {"codexErrorInfo": "other"}, turn="stale-turn", thread="thr-other"),
        *turn_start(),
        agent_message("fresh", "final_answer"),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", "fresh")


async def test_frames_before_the_turn_start_response_are_replayed_in_order(
    fake: FakeCodex,
) -> None:
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        notify("turn/started", {"threadId": THREAD, "turn": {"id": TURN}}),
        agent_message("early", "final_answer"),
        terminal(),
        {"op": "reply", "result": {"turn": {"id": TURN}}},
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", "early")


@pytest.mark.parametrize(
    ("early", "response_turn"),
    [
        ([notify("turn/started", {"threadId": THREAD, "turn": {"id": "turn-A"}})], TURN),
        (
            [
                notify("turn/started", {"threadId": THREAD, "turn": {"id": TURN}}),
                agent_message("x", None, turn="turn-2"),
            ],
            TURN,
        ),
        (
            [
                {
                    "op": "send",
                    "frame": {
                        "id": 1,
                        "method": "item/tool/requestUserInput",
                        "params": {"threadId": THREAD, "turnId": "turn-Z"},
                    },
                }
            ],
            TURN,
        ),
    ],
    ids=["started-mismatch", "conflicting-early-ids", "early-request-mismatch"],
)
async def test_mismatched_provisional_turns_fail_at_turn_start_without_a_fact(
    fake: FakeCodex, early: list[Step], response_turn: str
) -> None:
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        *early,
        {"op": "reply", "result": {"turn": {"id": response_turn}}},
        agent_message("a", "final_answer"),
        terminal(),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn-start; category: unknown)"
    )


@pytest.mark.parametrize(
    "response",
    [
        {"op": "reply_error", "code": -32000, "message": SECRET},
        {"op": "reply", "result": {"turn": {"id": ""}}},
        {"op": "reply", "result": "nope"},
    ],
    ids=["error-response", "empty-id", "non-object"],
)
async def test_turn_start_failures_are_stage_turn_start(
    fake: FakeCodex, response: dict[str, object]
) -> None:
    steps = [*handshake(), {"op": "expect", "method": "turn/start"}, response]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn-start; category: unknown)"
    )


# -- terminals ------------------------------------------------------------------------------


async def test_remote_interrupted_is_an_error_with_category_interrupted(fake: FakeCodex) -> None:
    steps = [*handshake(), *turn_start(), agent_message("half", None), terminal("interrupted")]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.text == "half"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: interrupted)"
    )


async def test_context_window_exceeded_is_max_tokens_with_partial_output(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        agent_message("partial answer", "final_answer"),
        failed("contextWindowExceeded"),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "max-tokens"
    assert result.text == "partial answer"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: contextWindowExceeded)"
    )


async def test_failed_error_without_info_or_non_object_is_unknown(fake: FakeCodex) -> None:
    for error in ({"message": SECRET}, SECRET, None):
        steps = [*handshake(), *turn_start(), terminal("failed", error)]
        result, _ = await delegate(fake.provider(steps), fake.workspace)
        assert result.diagnostic == (
            "Product subagent failure (product: Codex; stage: turn; category: unknown)"
        )


async def test_completed_terminal_before_exit_still_completes(fake: FakeCodex) -> None:
    steps = [*answered(text="done"), {"op": "exit", "code": 17}]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text, result.diagnostic) == ("completed", "done", None)


async def test_item_payloads_never_reach_the_diagnostic(fake: FakeCodex) -> None:
    steps = [*handshake(), *turn_start(), item("commandExecution", "declined"), failed("other")]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.diagnostic is not None
    assert SECRET not in result.diagnostic
    assert "planted" not in result.diagnostic


def test_fake_server_is_plain_python() -> None:
    # The harness runs the fake with the test interpreter in isolated mode.
    assert os.path.exists(sys.executable)
