"""Startup stages, process exits, cancellation, disposal and isolation (fake app-server)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import psutil
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
    make_request,
    terminal,
    turn_start,
    wait_until,
)
from dsh_subagent import (
    CancelController,
    ProductStartError,
    ProductTeardownError,
    StartCancelledError,
    SubagentError,
    SubagentErrorCode,
)
from dsh_subagent_codex import CodexProvider
from dsh_subprocess import DshSubprocessError, ManagedProcess

pytestmark = pytest.mark.anyio

INIT = (
    "subagent-codex: Product subagent failure (product: Codex; stage: initialize; category: unknown"
)
THREAD_START = (
    "subagent-codex: Product subagent failure (product: Codex; stage: thread-start; "
    "category: unknown"
)
CANCELLED = "subagent-codex: the request was cancelled before the run was published"


async def _start_fails(provider: CodexProvider, cwd: Path | None, **kw: Any) -> SubagentError:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with pytest.raises(SubagentError) as caught:
                await provider.start(make_request(tg, None if cwd is None else str(cwd), **kw))
    return caught.value


# -- admission ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ((), "subagent-codex: the one-shot task must contain only text blocks"),
        (("", "  \n"), "subagent-codex: the one-shot task must not be empty"),
    ],
)
async def test_invalid_tasks_are_refused_before_spawn(
    fake: FakeCodex, prompt: tuple[str, ...], message: str
) -> None:
    provider = fake.provider(answered())
    error = await _start_fails(provider, fake.workspace, prompt=prompt)
    assert (error.code, error.message) == (SubagentErrorCode.INVALID_REQUEST, message)
    assert not fake.spawned()


async def test_no_working_directory_is_refused_before_spawn(fake: FakeCodex) -> None:
    error = await _start_fails(fake.provider(answered()), None)
    assert error.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert "no working directory for the child" in error.message
    assert not fake.spawned()


@pytest.mark.parametrize("kind", ["relative", "missing", "file"])
async def test_invalid_parent_cwd_is_no_working_directory_without_the_path(
    fake: FakeCodex, kind: str
) -> None:
    target = fake.root / f"{SECRET.split('/')[0]}-{kind}"
    if kind == "file":
        target.write_text("x")
    cwd = Path("relative/dir") if kind == "relative" else target
    error = await _start_fails(fake.provider(answered()), cwd)
    assert not isinstance(error, ProductStartError)
    assert error.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert error.message == (
        "subagent-codex: the parent session cwd is not an absolute, accessible directory"
    )
    assert error.__cause__ is not None  # the raw probe message stays on the cause chain
    assert not fake.spawned()


async def test_pre_aborted_request_never_spawns(fake: FakeCodex) -> None:
    cancel = CancelController()
    cancel.cancel()
    error = await _start_fails(fake.provider(answered()), fake.workspace, cancel=cancel)
    assert isinstance(error, StartCancelledError)
    assert (error.code, error.message) == (SubagentErrorCode.START_CANCELLED, CANCELLED)
    assert not fake.spawned()


async def test_missing_binary_payload_fails_at_launch_without_fallback(
    fake: FakeCodex, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import codex_cli_bin  # type: ignore[import-untyped]

    def missing() -> Path:
        raise FileNotFoundError(f"missing payload at {SECRET}")

    monkeypatch.setattr(codex_cli_bin, "bundled_codex_path", missing)
    # A host "codex" on PATH must never be used as a fallback.
    host_bin = tmp_path / "bin"
    host_bin.mkdir()
    marker = tmp_path / "host-codex-ran"
    (host_bin / "codex").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (host_bin / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{host_bin}:/usr/bin:/bin")
    error = await _start_fails(CodexProvider(CodexProvider.Config()), fake.workspace)
    assert isinstance(error, ProductStartError)
    assert error.message == (
        "subagent-codex: Product subagent failure (product: Codex; stage: launch; "
        "category: unknown)"
    )
    assert isinstance(error.__cause__, FileNotFoundError)
    assert not marker.exists()


# -- startup stages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "prefix"),
    [
        ([{"op": "expect", "method": "initialize"}, {"op": "reply", "result": "nope"}], INIT),
        (
            [
                {"op": "expect", "method": "initialize"},
                {"op": "reply_error", "code": -32000, "message": SECRET},
            ],
            INIT,
        ),
        (
            [
                {"op": "expect", "method": "initialize"},
                {"op": "send", "frame": {"id": 0, "method": "item/tool/requestUserInput"}},
                {"op": "expect_reply", "id": 0},
                {"op": "reply", "result": {}},
            ],
            INIT,
        ),
        (handshake(ephemeral=False), THREAD_START),
        (handshake(thread_id=""), THREAD_START),
        (
            [*handshake()[:4], {"op": "reply_error", "code": 1, "message": SECRET}],
            THREAD_START,
        ),
    ],
    ids=[
        "invalid-initialize",
        "initialize-error",
        "request-before-turn",
        "non-ephemeral",
        "empty-thread-id",
        "thread-start-error",
    ],
)
async def test_startup_protocol_failures_roll_back_with_the_stage_line(
    fake: FakeCodex, steps: list[Step], prefix: str
) -> None:
    error = await _start_fails(fake.provider(steps), fake.workspace)
    assert isinstance(error, ProductStartError)
    assert error.message.startswith(prefix)
    assert SECRET not in error.message
    assert "invalid initialize response" not in error.message
    assert not error.rollback_failed


async def test_request_before_turn_start_is_refused_with_internal_error(fake: FakeCodex) -> None:
    steps: list[Step] = [
        {"op": "ignore_term"},
        {"op": "expect", "method": "initialize"},
        {"op": "send", "frame": {"id": 5, "method": "item/tool/requestUserInput", "params": {}}},
        {"op": "expect_reply", "id": 5},
    ]
    await _start_fails(fake.provider(steps), fake.workspace)
    (reply,) = [f for f in fake.frames() if f.get("id") == 5]
    assert reply["error"]["code"] == -32603


@pytest.mark.parametrize(
    ("exit_step", "fields"),
    [
        ({"op": "exit", "code": 23}, "; exit code: 23)"),
        ({"op": "kill", "signal": "SIGABRT"}, "; signal: SIGABRT)"),
    ],
)
async def test_child_exit_during_thread_start_keeps_stage_and_outcome(
    fake: FakeCodex, exit_step: Step, fields: str
) -> None:
    steps = [*handshake()[:4], exit_step]
    error = await _start_fails(fake.provider(steps), fake.workspace)
    # Startup failures never use stage "process", even when the child exited.
    assert error.message == (
        "subagent-codex: Product subagent failure (product: Codex; stage: thread-start; "
        f"category: process-exit{fields}"
    )


async def test_child_exit_during_initialize(fake: FakeCodex) -> None:
    error = await _start_fails(fake.provider([{"op": "exit", "code": 3}]), fake.workspace)
    assert error.message == (
        "subagent-codex: Product subagent failure (product: Codex; stage: initialize; "
        "category: process-exit; exit code: 3)"
    )


async def test_startup_and_rollback_failure_show_both_lines(
    fake: FakeCodex, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_terminate = ManagedProcess.terminate

    async def failing_terminate(self: ManagedProcess) -> Any:
        await real_terminate(self)  # the tree still goes; only the report fails
        raise DshSubprocessError("planted teardown failure " + SECRET)

    monkeypatch.setattr(ManagedProcess, "terminate", failing_terminate)
    steps: list[Step] = [
        {"op": "expect", "method": "initialize"},
        {"op": "reply", "result": 1},
    ]
    error = await _start_fails(fake.provider(steps), fake.workspace)
    assert isinstance(error, ProductStartError)
    assert error.rollback_failed
    first, second = error.message.split("; subagent-codex: ")
    assert first == f"{INIT})"
    assert second.startswith(
        "Product subagent failure (product: Codex; stage: teardown; category: unknown"
    )
    assert SECRET not in error.message
    assert isinstance(error.__cause__, BaseExceptionGroup)


async def test_abort_during_startup_rolls_back(fake: FakeCodex) -> None:
    ready = fake.root / "ready"
    steps = [
        {"op": "expect", "method": "initialize"},
        {"op": "ready", "path": str(ready)},
        {"op": "hang"},
    ]
    provider = fake.provider(steps)
    cancel = CancelController()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            async def abort_when_ready() -> None:
                await wait_until(ready.exists)
                cancel.cancel()

            tg.start_soon(abort_when_ready)
            with pytest.raises(StartCancelledError) as caught:
                await provider.start(make_request(tg, str(fake.workspace), cancel=cancel))
    assert caught.value.message == CANCELLED
    assert not caught.value.rollback_failed


async def test_caller_cancellation_during_startup_rolls_back(fake: FakeCodex) -> None:
    ready = fake.root / "ready"
    steps = [
        {"op": "expect", "method": "initialize"},
        {"op": "ready", "path": str(ready)},
        {"op": "hang"},
    ]
    provider = fake.provider(steps)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:

                async def cancel_when_ready() -> None:
                    await wait_until(ready.exists)
                    scope.cancel()

                tg.start_soon(cancel_when_ready)
                await provider.start(make_request(tg, str(fake.workspace)))
            assert scope.cancelled_caught
    # The root conftest fails the test if the fake app-server is still alive.


# -- published process failures --------------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_step", "fields"),
    [
        ({"op": "exit", "code": 9}, "; exit code: 9)"),
        ({"op": "exit", "code": 0}, "; exit code: 0)"),
        ({"op": "kill", "signal": "SIGABRT"}, "; signal: SIGABRT)"),
    ],
)
async def test_exit_after_publication_is_stage_process(
    fake: FakeCodex, exit_step: Step, fields: str
) -> None:
    steps = [*handshake(), *turn_start(), agent_message("half", None), exit_step]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.text == "half"
    assert result.diagnostic == (
        f"Product subagent failure (product: Codex; stage: process; category: process-exit{fields}"
    )


async def test_exit_before_the_turn_start_response(fake: FakeCodex) -> None:
    steps: list[Step] = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        {"op": "exit", "code": 4},
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: process; category: process-exit; "
        "exit code: 4)"
    )


async def test_stdout_eof_without_exit_waits_the_grace_then_reports_the_process_gone(
    fake: FakeCodex,
) -> None:
    # The end of the app-server's output ends its usefulness: the runtime reports it as
    # the product's exit, with no exit fields because none was observed within the grace.
    steps = [*handshake(), *turn_start(), {"op": "close_stdout"}, {"op": "hang"}]
    result, _ = await delegate(fake.provider(steps, dispose_grace=0.3), fake.workspace)
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: process; category: process-exit)"
    )


async def test_exit_with_stdout_held_by_a_grandchild_is_still_a_process_failure(
    fake: FakeCodex,
) -> None:
    steps = [*handshake(), *turn_start(), {"op": "grandchild"}, {"op": "exit", "code": 12}]
    result, _ = await delegate(fake.provider(steps, dispose_grace=0.3), fake.workspace)
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: process; category: process-exit; "
        "exit code: 12)"
    )
    (grandchild,) = [r["pid"] for r in fake.records() if r.get("event") == "grandchild"]
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie"


# -- cancellation and disposal ---------------------------------------------------------------


async def test_abort_mid_turn_settles_aborted_and_interrupts(fake: FakeCodex) -> None:
    ready = fake.root / "ready"
    steps = [
        {"op": "ignore_term"},
        *handshake(),
        *turn_start(),
        agent_message("partial", None),
        # The client's reply proves it has read the turn/start response: only a known
        # turn is interrupted, and the marker alone would race the client's reading.
        _req("item/tool/requestUserInput"),
        {"op": "expect_reply", "id": 7},
        {"op": "ready", "path": str(ready)},
        {"op": "expect", "method": "turn/interrupt"},
        {"op": "reply", "result": {}},
        terminal("interrupted"),
    ]
    provider = fake.provider(steps)
    cancel = CancelController()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, str(fake.workspace), cancel=cancel))
            await wait_until(ready.exists)
            cancel.cancel()
            result = await run.result()
            await run.dispose()
    assert result.stop_reason == "aborted"
    assert result.diagnostic is None
    interrupts = fake.sent("turn/interrupt")
    assert interrupts
    assert interrupts[0]["params"] == {"threadId": THREAD, "turnId": TURN}


async def test_dispose_is_memoised_and_waits_for_whole_tree_exit(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        {"op": "grandchild"},
        {"op": "ignore_term"},
        {"op": "hang"},
    ]
    provider = fake.provider(steps, dispose_grace=0.2)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, str(fake.workspace)))
            await wait_until(lambda: any(r.get("event") == "grandchild" for r in fake.records()))
            async with anyio.create_task_group() as disposers:
                for _ in range(3):
                    disposers.start_soon(run.dispose)
            result = await run.result()
            await run.dispose()
    assert result.stop_reason == "aborted"
    pids = [r["pid"] for r in fake.records() if r.get("event") == "grandchild"]
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


async def test_teardown_failure_rejects_dispose_with_the_teardown_line(
    fake: FakeCodex, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_terminate = ManagedProcess.terminate

    async def failing_terminate(self: ManagedProcess) -> Any:
        await real_terminate(self)
        raise DshSubprocessError("planted " + SECRET)

    monkeypatch.setattr(ManagedProcess, "terminate", failing_terminate)
    provider = fake.provider(answered())
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, str(fake.workspace)))
            result = await run.result()
            with pytest.raises(ProductTeardownError) as first:
                await run.dispose()
            with pytest.raises(ProductTeardownError) as second:
                await run.dispose()
    assert result.stop_reason == "completed"
    assert first.value is second.value
    assert first.value.message.startswith(
        "subagent-codex: Product subagent failure (product: Codex; stage: teardown; "
        "category: unknown"
    )
    assert SECRET not in first.value.message


# -- server requests and permission facts -----------------------------------------------------


def _request_run(request_step: Step, *after: Step) -> list[Step]:
    # SIGTERM is ignored so the fake logs every reply before it exits on stdin EOF.
    return [
        {"op": "ignore_term"},
        *handshake(),
        *turn_start(),
        request_step,
        {"op": "expect_reply", "id": 7},
        *after,
    ]


def _req(method: str, **params: Any) -> Step:
    payload = {"threadId": THREAD, "turnId": TURN, "itemId": "i", "command": SECRET, **params}
    return {"op": "send", "frame": {"id": 7, "method": method, "params": payload}}


FACT = "Codex unattended decision (mode: never; request: {}; decision: {}): {}"
NO_APPROVAL = "the provider does not grant interactive approval"


@pytest.mark.parametrize(
    ("request_step", "answer", "fact"),
    [
        (
            _req(
                "item/commandExecution/requestApproval",
                availableDecisions=["accept", {"x": 1}, "cancel"],
            ),
            {"decision": "cancel"},
            FACT.format("command approval", "cancelled", NO_APPROVAL),
        ),
        (
            _req("item/commandExecution/requestApproval", availableDecisions=["decline"]),
            {"decision": "decline"},
            FACT.format("command approval", "declined", NO_APPROVAL),
        ),
        (
            _req("item/commandExecution/requestApproval"),
            {"decision": "decline"},
            FACT.format("command approval", "declined", NO_APPROVAL),
        ),
        (
            _req("item/fileChange/requestApproval", availableDecisions=["decline", "cancel"]),
            {"decision": "cancel"},
            FACT.format("file approval", "cancelled", NO_APPROVAL),
        ),
        (
            _req("item/fileChange/requestApproval", availableDecisions=None),
            {"decision": "decline"},
            FACT.format("file approval", "declined", NO_APPROVAL),
        ),
        (
            _req("item/permissions/requestApproval", permissions={"network": {"enabled": True}}),
            {"permissions": {}, "scope": "turn"},
            FACT.format(
                "permission grant", "denied", "the provider grants no additional turn permissions"
            ),
        ),
        (
            _req("item/tool/requestUserInput", questions=[{"id": "q", "question": SECRET}]),
            {"answers": {}},
            FACT.format(
                "user input", "empty response", "the provider does not collect interactive answers"
            ),
        ),
        (
            _req("mcpServer/elicitation/request", turnId=None, serverName=SECRET),
            {"action": "decline", "content": None, "_meta": None},
            FACT.format(
                "MCP elicitation", "declined", "the provider does not collect interactive MCP input"
            ),
        ),
    ],
    ids=[
        "command-cancel",
        "command-decline",
        "command-no-list",
        "file-cancel",
        "file-null-list",
        "permissions",
        "user-input",
        "elicitation",
    ],
)
async def test_server_requests_are_answered_unattended_and_recorded(
    fake: FakeCodex, request_step: Step, answer: dict[str, Any], fact: str
) -> None:
    steps = _request_run(request_step, failed("other"))
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    (reply,) = [f for f in fake.frames() if f.get("id") == 7]
    assert reply["result"] == answer
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: other)\n" + fact
    )
    assert SECRET not in result.diagnostic


async def test_a_successful_run_after_a_request_has_no_diagnostic(fake: FakeCodex) -> None:
    steps = _request_run(_req("item/tool/requestUserInput"), agent_message("ok", None), terminal())
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.diagnostic) == ("completed", None)


@pytest.mark.parametrize(
    "request_step",
    [
        _req("item/tool/call"),
        _req("execCommandApproval"),
        _req("item/commandExecution/requestApproval", availableDecisions=["accept"]),
        _req("item/fileChange/requestApproval", availableDecisions="decline"),
        _req("item/tool/requestUserInput", threadId="thr-other"),
        _req("item/tool/requestUserInput", turnId="turn-other"),
        _req("item/tool/requestUserInput", turnId=None),
    ],
    ids=[
        "unknown-method",
        "legacy-approval",
        "accept-only",
        "string-decisions",
        "other-thread",
        "other-turn",
        "null-turn",
    ],
)
async def test_illegal_requests_get_an_internal_error_and_fail_the_run(
    fake: FakeCodex, request_step: Step
) -> None:
    steps = _request_run(request_step, agent_message("ok", "final_answer"), terminal())
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    (reply,) = [f for f in fake.frames() if f.get("id") == 7]
    assert reply["error"]["code"] == -32603
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: unknown)"
    )


async def test_unsupported_request_in_the_terminal_chunk_still_fails(fake: FakeCodex) -> None:
    frames = [
        agent_message("ok", "final_answer")["frame"],
        terminal()["frame"],
        {"id": 8, "method": "item/tool/call", "params": {"threadId": THREAD, "turnId": TURN}},
    ]
    steps = [*handshake(), *turn_start(), {"op": "send_many", "frames": frames}]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"


async def test_early_request_fact_is_deferred_and_the_latest_fact_wins(fake: FakeCodex) -> None:
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        _req("item/commandExecution/requestApproval", availableDecisions=["cancel"]),
        {"op": "expect_reply", "id": 7},
        {"op": "reply", "result": {"turn": {"id": TURN}}},
        {
            "op": "send",
            "frame": {
                "id": 9,
                "method": "item/tool/requestUserInput",
                "params": {"threadId": THREAD, "turnId": TURN},
            },
        },
        {"op": "expect_reply", "id": 9},
        failed("badRequest"),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: badRequest)\n"
        + FACT.format(
            "user input", "empty response", "the provider does not collect interactive answers"
        )
    )


async def test_newer_request_fact_survives_replay_of_an_older_early_item(
    fake: FakeCodex,
) -> None:
    declined = {
        "method": "item/completed",
        "params": {
            "threadId": THREAD,
            "turnId": TURN,
            "item": {"type": "fileChange", "id": "f", "status": "declined"},
        },
    }
    steps = [
        *handshake(),
        {"op": "expect", "method": "turn/start"},
        {"op": "send", "frame": declined},
        _req("item/permissions/requestApproval"),
        {"op": "expect_reply", "id": 7},
        {"op": "reply", "result": {"turn": {"id": TURN}}},
        failed("other"),
    ]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.diagnostic is not None
    assert result.diagnostic.endswith(
        FACT.format(
            "permission grant", "denied", "the provider grants no additional turn permissions"
        )
    )


async def test_declined_items_record_their_facts_with_the_instance_mode(fake: FakeCodex) -> None:
    for item_type, fact in (
        (
            "commandExecution",
            ("command execution", "Codex declined the command under the selected permission mode"),
        ),
        (
            "fileChange",
            ("file change", "Codex declined the file change under the selected permission mode"),
        ),
    ):
        declined = {
            "method": "item/completed",
            "params": {
                "threadId": THREAD,
                "turnId": TURN,
                "item": {"type": item_type, "id": "x", "status": "declined", "changes": SECRET},
            },
        }
        steps = [*handshake(), *turn_start(), {"op": "send", "frame": declined}, failed("other")]
        provider = fake.provider(steps, permission_mode="dangerously-bypass-approvals-and-sandbox")
        result, _ = await delegate(provider, fake.workspace)
        assert result.diagnostic is not None
        assert result.diagnostic.split("\n")[1] == (
            "Codex unattended decision (mode: dangerously-bypass-approvals-and-sandbox; "
            f"request: {fact[0]}; decision: declined): {fact[1]}"
        )


async def test_stderr_is_logged_but_never_classified(
    fake: FakeCodex, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    noise = f"approval policy is Never; reject command\nrecorded sandbox violation: {SECRET}\n"
    steps = [*handshake(), *turn_start(), {"op": "stderr", "data": noise}, failed("other")]
    with caplog.at_level(logging.INFO, logger="dsh.product.codex"):
        result, run = await delegate(fake.provider(steps), fake.workspace)
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: other)"
    )
    records = [r for r in caplog.records if r.name == "dsh.product.codex"]
    assert [r.getMessage() for r in records] == [
        "approval policy is Never; reject command",
        f"recorded sandbox violation: {SECRET}",
    ]
    assert {(r.provider, r.run_id) for r in records} == {("codex", run.id)}  # type: ignore[attr-defined]
    assert SECRET not in capfd.readouterr().err  # never written to the host's stderr


# -- isolation ------------------------------------------------------------------------------


async def test_concurrent_runs_are_isolated(fake: FakeCodex) -> None:
    providers = [
        fake.provider(answered(text=f"answer-{i}"), permission_mode=mode)
        for i, mode in enumerate(["never", "approve-for-me", "never", "never"])
    ]
    providers.append(fake.provider([*handshake(), *turn_start(), failed("usageLimitExceeded")]))
    results: dict[int, Any] = {}

    async def one(index: int, provider: CodexProvider) -> None:
        results[index] = (await delegate(provider, fake.workspace))[0]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for index, provider in enumerate(providers):
                tg.start_soon(one, index, provider)
    assert [results[i].text for i in range(4)] == [f"answer-{i}" for i in range(4)]
    assert all(results[i].diagnostic is None for i in range(4))
    assert results[4].diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: usageLimitExceeded)"
    )
    assert fake.sent("thread/start", 1)[0]["params"]["approvalPolicy"] == "on-request"
    assert fake.sent("thread/start", 0)[0]["params"]["approvalPolicy"] == "never"


async def test_abort_of_one_run_leaves_a_sibling_alone(fake: FakeCodex) -> None:
    ready = fake.root / "ready"
    slow = fake.provider(
        [*handshake(), *turn_start(), {"op": "ready", "path": str(ready)}, {"op": "hang"}]
    )
    quick_release = fake.root / "go"
    quick = fake.provider(answered(text="sibling"))
    cancel = CancelController()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            slow_run = await slow.start(make_request(tg, str(fake.workspace), cancel=cancel))
            await wait_until(ready.exists)
            cancel.cancel()
            quick_result, _ = await delegate(quick, fake.workspace)
            slow_result = await slow_run.result()
            await slow_run.dispose()
    assert not quick_release.exists()
    assert slow_result.stop_reason == "aborted"
    assert (quick_result.stop_reason, quick_result.text) == ("completed", "sibling")
