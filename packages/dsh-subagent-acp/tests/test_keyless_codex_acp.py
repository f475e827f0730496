"""Keyless real-agent tier: the pinned native codex-acp 0.16.0 against the loopback
Responses fixture, isolated in a temporary HOME/CODEX_HOME/TMPDIR, loopback only.

The agent comes from ``scripts/install-acp-agent`` (npm ``@zed-industries/codex-acp``).
The budget tests hold or stall the model stream and wait for the bound to fire (an
event), never asserting how fast.
These tests skip only when that script reports the npm registry unreachable; any other
installation problem fails them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from acp_agent import codex_acp_or_skip
from acp_harness import delegate_with_progress, make_request, pid_alive, started_run
from dsh_contract_tests.fixtures.responses import (
    DEFAULT_FIXTURE_API_KEY,
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
    CancelController,
    FileChanged,
    ProgressEvent,
    SubagentResult,
    ToolFinished,
    ToolStarted,
    UsageUpdated,
)
from dsh_subagent_acp import AcpConfig, AcpProvider, PermissionPolicy
from dsh_subprocess.testing import ProcessWatch, host_descendants

# A slug codex-acp knows: an unknown one makes it stream a metadata warning as an
# agent_message_chunk, which would land in the answer (products.md, pitfall A1).
MODEL = "gpt-5.4-mini"
ANSWER = "FAKE-ANSWER: 42"
TASK = "Reply with exactly the text FAKE-ANSWER: 42 and nothing else."

pytestmark = [pytest.mark.keyless, pytest.mark.anyio]


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def codex_acp() -> str:
    """The native codex-acp binary, installed on demand by the project's script."""
    return codex_acp_or_skip()


def _provider(
    codex_acp: str,
    tmp_path: Path,
    fixture: ResponsesFixture,
    *,
    permission: PermissionPolicy = "reject",
    asks: bool = False,
    runs_tools: bool = False,
    extra_env: dict[str, str] | None = None,
    **config: Any,
) -> AcpProvider:
    env = {**codex_keyless_env(tmp_path / "root"), **(extra_env or {})}
    if runs_tools:
        # No approval asked, no sandbox (the read-only one needs bubblewrap, pitfall A2).
        write_codex_config(
            env["CODEX_HOME"],
            fixture.base_url,
            model=MODEL,
            approval_policy="never",
            sandbox_mode="danger-full-access",
        )
    elif asks:
        # "untrusted" makes codex-acp ask before exec; tools need danger-full-access
        # here because the read-only sandbox needs bubblewrap (products.md, pitfall A2).
        write_codex_config(
            env["CODEX_HOME"],
            fixture.base_url,
            model=MODEL,
            approval_policy="untrusted",
            sandbox_mode="danger-full-access",
        )
    else:
        write_codex_config(env["CODEX_HOME"], fixture.base_url, model=MODEL)
    env["RUST_LOG"] = "warn"
    return AcpProvider(
        AcpConfig(
            provider_name="codex-acp",
            command=codex_acp,
            # As the README tells users: codex-acp's shell snapshots would write the
            # agent's environment, the fake key included, under CODEX_HOME and keep it.
            args=("-c", "features.shell_snapshot=false"),
            env=env,
            permission=permission,
            # codex-acp never exits on stdin EOF: a short EOF window keeps dispose quick.
            dispose_eof_grace=0.2,
            dispose_grace=2.0,
            **config,
        )
    )


TOUCH = FunctionCall(
    (
        ("exec_command", {"cmd": "touch marker.txt"}),
        ("shell", {"command": ["touch", "marker.txt"]}),
    )
)


async def test_reject_policy_real_exec_approval(codex_acp: str, tmp_path: Path) -> None:
    # codex-acp offers approved/allow_once, approved-execpolicy-amendment/allow_always and
    # abort/reject_once. Selecting the reject_once option (by kind) is Codex's "abort":
    # the command never runs and the agent ends its turn ``cancelled`` -> aborted.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with ResponsesFixture([TOUCH, PlainAnswer(ANSWER)]) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture, asks=True)
        with anyio.fail_after(60):
            async with started_run(provider, cwd=str(workspace), prompt=TASK) as run:
                result = await run.result()
    assert not (workspace / "marker.txt").exists()
    assert result.stop_reason == "aborted"
    assert len(fixture.requests) == 1


async def test_allow_policy_real_exec_approval(codex_acp: str, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with ResponsesFixture([TOUCH, PlainAnswer(ANSWER)]) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture, permission="allow", asks=True)
        with anyio.fail_after(60):
            async with started_run(provider, cwd=str(workspace), prompt=TASK) as run:
                result = await run.result()
    assert (workspace / "marker.txt").exists()
    assert result.stop_reason == "completed"
    assert result.text == ANSWER
    assert len(fixture.requests) == 2


async def test_exact_answer_and_the_fixture_saw_the_task(codex_acp: str, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with ResponsesFixture([PlainAnswer(ANSWER)]) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture)
        begun = time.monotonic()
        with anyio.fail_after(60):
            async with started_run(provider, cwd=str(workspace), prompt=TASK) as run:
                result = await run.result()
        took = time.monotonic() - begun
    assert result.stop_reason == "completed", result
    assert result.text == ANSWER
    assert result.diagnostic is None
    (request,) = fixture.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.bearer_token == DEFAULT_FIXTURE_API_KEY
    assert request.model == MODEL
    assert TASK in request.input_texts()
    print(f"\nkeyless codex-acp delegation incl. dispose: {took:.2f} s")


async def test_cancel_mid_turn_settles_aborted_and_leaves_nothing(
    codex_acp: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    controller = CancelController()
    with ResponsesFixture([Hold()]) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                run = await provider.start(
                    make_request(tg, cwd=str(workspace), prompt=TASK, controller=controller)
                )
                await anyio.to_thread.run_sync(fixture.wait_for_hold)
                during = {p.pid for p in host_descendants()}
                assert any(pid_alive(pid) for pid in during)
                cancelled = time.monotonic()
                controller.cancel()
                result = await run.result()
                await run.dispose()
                gone = time.monotonic() - cancelled
    print(f"\nkeyless codex-acp cancel -> tree gone: {gone:.2f} s")  # evidence, not asserted
    assert result.stop_reason == "aborted"
    assert result.diagnostic is None
    assert not [pid for pid in during if pid_alive(pid)], "a codex-acp process survived"
    assert len(fixture.requests) == 1
    assert TASK in fixture.requests[0].input_texts()


# -- progress, usage and budgets -----------------------------------------------------------

PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\nEOF\n"


def _is_subsequence(expected: Sequence[object], events: Sequence[object]) -> bool:
    remaining = iter(events)
    return all(any(event == wanted for event in remaining) for wanted in expected)


def _gone_before_dispose(watch: ProcessWatch) -> Callable[[SubagentResult], None]:
    def check(_result: SubagentResult) -> None:
        assert any("codex-acp" in seen.name for seen in watch.seen), "the agent never ran"
        assert watch.alive() == [], "the result came before the tree was gone"

    return check


async def test_a_scripted_task_gives_its_exact_progress(codex_acp: str, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "echo one"}),), ResponseUsage(1200, 80), "call_one"),
        FunctionCall((("exec_command", {"cmd": PATCH}),), ResponseUsage(1350, 60), "call_two"),
        PlainAnswer(ANSWER, usage=ResponseUsage(1500, 40)),
    ]
    with ResponsesFixture(script) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture, runs_tools=True)
        result, events = await delegate_with_progress(
            provider, cwd=str(workspace), prompt=TASK, progress_commands=True, deadline=60
        )
    print("\nobserved progress:", *(e.model_dump_json() for e in events), sep="\n  ")
    assert (result.stop_reason, result.text) == (COMPLETED, ANSWER)
    assert (workspace / "hello.txt").read_text() == "hi\n"
    expected: list[ProgressEvent] = [
        ToolStarted(tool_kind="command", name="execute", call_id="call_one", command="echo one"),
        ToolFinished(tool_kind="command", name="execute", call_id="call_one", ok=True),
        ToolStarted(tool_kind="file-edit", name="edit", call_id="call_two"),
        ToolFinished(tool_kind="file-edit", name="edit", call_id="call_two", ok=True),
        FileChanged(path=str(workspace / "hello.txt")),
        AssistantText(text=ANSWER, delta=True),
    ]
    assert _is_subsequence(expected, events), [e.kind for e in events]
    # codex-acp 0.16.0 states only its context window (usage_update used/size), no cost and
    # no token counts on the prompt answer: there is no usage to report, none is guessed.
    assert not [e for e in events if isinstance(e, UsageUpdated)]
    assert result.usage is None
    assert len(fixture.requests) == 3


async def test_an_env_value_a_command_prints_never_reaches_progress(
    codex_acp: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    secret = "PLANTED-ENV-VALUE-0d41a7"
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": "printenv PLANTED_PROGRESS_VALUE"}),)),
        PlainAnswer(ANSWER),
    ]
    with ResponsesFixture(script) as fixture:
        provider = _provider(
            codex_acp,
            tmp_path,
            fixture,
            runs_tools=True,
            extra_env={"PLANTED_PROGRESS_VALUE": secret},
        )
        result, events = await delegate_with_progress(
            provider, cwd=str(workspace), prompt=TASK, progress_commands=True, deadline=60
        )
    assert result.stop_reason == COMPLETED
    assert secret in fixture.requests[1].raw_body.decode()  # the command did print it
    assert any(isinstance(e, ToolFinished) for e in events)
    assert not [e for e in events if secret in e.model_dump_json()]


async def test_the_deadline_fires_mid_prompt_with_its_fixed_diagnostic(
    codex_acp: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with ResponsesFixture([Hold(then=PlainAnswer("too late"))]) as fixture:
        provider = _provider(codex_acp, tmp_path, fixture)
        with ProcessWatch() as watch:
            result, _events = await delegate_with_progress(
                provider,
                cwd=str(workspace),
                prompt=TASK,
                budget=Budget(deadline_seconds=5.0),
                deadline=60,
                on_result=_gone_before_dispose(watch),
            )
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: ACP; stage: prompt; category: deadline-exceeded)"
    )
    assert len(fixture.requests) == 1


async def test_the_idle_timeout_fires_when_the_model_goes_silent_mid_stream(
    codex_acp: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with ResponsesFixture([Stall("half an ans")]) as fixture:
        # codex-acp answers initialize in well under a second; 3 s of silence is the stall.
        provider = _provider(codex_acp, tmp_path, fixture, idle_timeout_seconds=3.0)
        with ProcessWatch() as watch:
            result, events = await delegate_with_progress(
                provider,
                cwd=str(workspace),
                prompt=TASK,
                deadline=60,
                on_result=_gone_before_dispose(watch),
            )
    print("\nobserved progress:", *(e.model_dump_json() for e in events), sep="\n  ")
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: ACP; stage: prompt; category: idle-timeout)"
    )
    assert AssistantText(text="half an ans", delta=True) in events  # then silence
    assert len(fixture.requests) == 1
