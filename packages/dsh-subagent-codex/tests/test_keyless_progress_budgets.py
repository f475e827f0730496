"""Keyless real-product tier for progress, usage and budgets: the pinned Codex app-server
against the loopback Responses fixture (temporary HOME, CODEX_HOME, TMPDIR; loopback only).

The scripted task makes Codex run a shell command, apply a patch through the shell and
answer, three model requests with exact usage each; the budget tests hold or stall the
model stream and wait for the bound to fire (an event), never asserting how fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from codex_harness import delegate_with_progress
from dsh_contract_tests.fixtures.responses import (
    Behaviour,
    FunctionCall,
    Hold,
    PlainAnswer,
    ResponsesFixture,
    ResponseUsage,
    Stall,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    COMPLETED,
    ERROR,
    AssistantText,
    Budget,
    FileChanged,
    ProgressEvent,
    SubagentResult,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import ProcessWatch

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\nEOF\n"
FIRST = ResponseUsage(1200, 80, cached_tokens=1000, reasoning_tokens=30)
SECOND = ResponseUsage(1350, 60, cached_tokens=1200)
THIRD = ResponseUsage(1500, 40, cached_tokens=1400, reasoning_tokens=10)


def _sum(*parts: ResponseUsage) -> Usage:
    return Usage(
        input_tokens=sum(p.input_tokens for p in parts),
        cached_input_tokens=sum(p.cached_tokens for p in parts),
        output_tokens=sum(p.output_tokens for p in parts),
        reasoning_tokens=sum(p.reasoning_tokens for p in parts),
    )


def _provider(
    tmp_path: Path,
    fixture: ResponsesFixture,
    extra_env: dict[str, str] | None = None,
    **config: Any,
) -> CodexProvider:
    env = {**codex_keyless_env(tmp_path / "keyless"), **(extra_env or {})}
    write_codex_config(env["CODEX_HOME"], fixture.base_url)
    config.setdefault("dispose_grace", 2.0)
    return CodexProvider(CodexConfig(env=env, **config))


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


def _is_subsequence(expected: Sequence[object], events: Sequence[object]) -> bool:
    remaining = iter(events)
    return all(any(event == wanted for event in remaining) for wanted in expected)


def _gone_before_dispose(watch: ProcessWatch) -> Callable[[SubagentResult], None]:
    def check(_result: SubagentResult) -> None:
        assert any("codex" in seen.name for seen in watch.seen), "the product never ran"
        assert watch.alive() == [], "the result came before the tree was gone"

    return check


def _kinds(events: Sequence[ProgressEvent]) -> list[str]:
    return [event.kind for event in events]


async def test_a_scripted_task_gives_its_exact_progress_and_usage(tmp_path: Path) -> None:
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "echo one"}),), FIRST, "call_one"),
        FunctionCall((("exec_command", {"cmd": PATCH}),), SECOND, "call_two"),
        PlainAnswer("done", usage=THIRD),
    ]
    workspace = _workspace(tmp_path)
    with ResponsesFixture(script) as fixture:
        provider = _provider(
            tmp_path, fixture, permission_mode="dangerously-bypass-approvals-and-sandbox"
        )
        result, events = await delegate_with_progress(
            provider, workspace, progress_commands=True, deadline=90
        )
    print("\nobserved progress:", *(e.model_dump_json() for e in events), sep="\n  ")
    assert (result.stop_reason, result.text) == (COMPLETED, "done")
    assert (workspace / "hello.txt").read_text() == "hi\n"
    first, both, total = _sum(FIRST), _sum(FIRST, SECOND), _sum(FIRST, SECOND, THIRD)
    assert [e.usage for e in events if isinstance(e, UsageUpdated)] == [first, both, total]
    assert result.usage == total
    assert total == Usage(
        input_tokens=4050, cached_input_tokens=3600, output_tokens=180, reasoning_tokens=40
    )
    (command_start,) = [
        e for e in events if isinstance(e, ToolStarted) and e.tool_kind == "command"
    ]
    assert command_start.command is not None
    assert "echo one" in command_start.command  # opted in; Codex wraps it in a login shell
    (changed,) = [e for e in events if isinstance(e, FileChanged)]
    assert changed.path == str(workspace / "hello.txt")
    expected: list[ProgressEvent] = [
        TurnStarted(),
        command_start,
        ToolFinished(tool_kind="command", name="commandExecution", call_id="call_one", ok=True),
        UsageUpdated(usage=first),
        ToolStarted(tool_kind="file-edit", name="fileChange", call_id="call_two"),
        ToolFinished(tool_kind="file-edit", name="fileChange", call_id="call_two", ok=True),
        changed,
        UsageUpdated(usage=both),
        AssistantText(text="done", delta=True),
        AssistantText(text="done"),
        UsageUpdated(usage=total),
    ]
    assert _is_subsequence(expected, events), _kinds(events)
    assert [r.path for r in fixture.requests] == ["/v1/responses"] * 3


async def test_without_the_opt_in_no_command_text_is_reported(tmp_path: Path) -> None:
    marker = "COMMAND-TEXT-MARKER-5a1f"
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": f"echo {marker}"}),)),
        PlainAnswer("ok"),
    ]
    with ResponsesFixture(script) as fixture:
        provider = _provider(
            tmp_path, fixture, permission_mode="dangerously-bypass-approvals-and-sandbox"
        )
        result, events = await delegate_with_progress(provider, _workspace(tmp_path), deadline=90)
    assert result.stop_reason == COMPLETED
    starts = [e for e in events if isinstance(e, ToolStarted)]
    assert [(e.tool_kind, e.command) for e in starts] == [("command", None)]
    assert not [e for e in events if marker in e.model_dump_json()]


async def test_an_env_value_a_command_prints_never_reaches_progress(tmp_path: Path) -> None:
    secret = "PLANTED-ENV-VALUE-6c2e9b"
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "printenv PLANTED_PROGRESS_VALUE"}),)),
        PlainAnswer("ok"),
    ]
    with ResponsesFixture(script) as fixture:
        provider = _provider(
            tmp_path,
            fixture,
            {"PLANTED_PROGRESS_VALUE": secret},
            permission_mode="dangerously-bypass-approvals-and-sandbox",
        )
        result, events = await delegate_with_progress(
            provider, _workspace(tmp_path), progress_commands=True, deadline=90
        )
    assert result.stop_reason == COMPLETED
    assert secret in fixture.requests[1].raw_body.decode()  # the command did print it
    assert "tool-finished" in _kinds(events)
    assert not [e for e in events if secret in e.model_dump_json()]


async def test_the_deadline_fires_mid_turn_with_its_fixed_diagnostic(tmp_path: Path) -> None:
    with ResponsesFixture([Hold(then=PlainAnswer("too late"))]) as fixture:
        provider = _provider(tmp_path, fixture)
        with ProcessWatch() as watch:
            result, events = await delegate_with_progress(
                provider,
                _workspace(tmp_path),
                budget=Budget(deadline_seconds=5.0),  # a request tightens an unbounded config
                deadline=90,
                on_result=_gone_before_dispose(watch),
            )
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: deadline-exceeded)"
    )
    assert TurnStarted() in events
    assert len(fixture.requests) == 1


async def test_the_idle_timeout_fires_when_the_model_goes_silent_mid_stream(
    tmp_path: Path,
) -> None:
    with ResponsesFixture([Stall("half an ans")]) as fixture:
        # Codex's own stream idle timeout (30 s in the fixture config) is far longer.
        # Codex answers initialize in well under a second; 3 s of silence is the stall.
        provider = _provider(tmp_path, fixture, idle_timeout_seconds=3.0)
        with ProcessWatch() as watch:
            result, events = await delegate_with_progress(
                provider, _workspace(tmp_path), deadline=90, on_result=_gone_before_dispose(watch)
            )
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: idle-timeout)"
    )
    assert _is_subsequence([TurnStarted(), AssistantText(text="half an ans", delta=True)], events)
    assert result.usage is None  # the stalled response never reported any
    assert len(fixture.requests) == 1
