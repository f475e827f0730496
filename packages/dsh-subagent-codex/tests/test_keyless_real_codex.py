"""Keyless real-product tier: the pinned Codex app-server against the loopback fixture.

Required evidence (seed 004): never skipped. Every run gets a temporary HOME,
CODEX_HOME, TMPDIR and XDG dir, a fake bearer key passed through the provider's explicit
``env`` and loopback-only traffic; the root conftest fails a test that leaves any process
of the tree alive.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from codex_harness import make_request
from dsh_contract_tests.fixtures.responses import (
    DEFAULT_FIXTURE_API_KEY,
    DEFAULT_FIXTURE_MODEL,
    FunctionCall,
    Hold,
    HttpError,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    CancelController,
    ConfinementSetting,
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import landlock_abi
from dsh_subprocess.testing import host_descendants

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

SENTINEL = "REAL_CODEX_SENTINEL_0_163_0 — exact\n  bytes ✓"
TASK = "Reply with the sentinel. TASK-MARKER-7f3a"


@dataclass
class Keyless:
    root: Path
    workspace: Path
    env: dict[str, str]

    def provider(self, **config: Any) -> CodexProvider:
        config.setdefault("dispose_grace", 2.0)
        return CodexProvider(CodexConfig(env=dict(self.env), **config))


def _keyless(tmp_path: Path, fixture: ResponsesFixture, **config: Any) -> Keyless:
    root = tmp_path / "keyless"
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    env = codex_keyless_env(root)
    write_codex_config(env["CODEX_HOME"], fixture.base_url, **config)
    return Keyless(root, workspace, env)


class TreeRss:
    """Samples the summed RSS of this process's descendants (the app-server tree)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for proc in host_descendants():  # the guard server is not the app-server tree
                with contextlib.suppress(psutil.Error):  # exited between listing and reading
                    total += proc.memory_info().rss
            self.peak = max(self.peak, total)
            self._stop.wait(0.005)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _no_descendants() -> bool:
    return not host_descendants()


async def _delegate(
    provider: CodexProvider,
    workspace: Path,
    task: str = TASK,
    cancel: CancelController | None = None,
) -> SubagentResult:
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            request = make_request(tg, str(workspace), prompt=[task], cancel=cancel)
            run = await provider.start(request)
            try:
                result = await run.result()
            finally:
                await run.dispose()
    return result


async def test_exact_answer_key_task_and_inherited_model(tmp_path: Path) -> None:
    with ResponsesFixture([PlainAnswer(SENTINEL)]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        provider = keyless.provider()
        with TreeRss() as rss:
            started = time.monotonic()
            result = await _delegate(provider, keyless.workspace)
            elapsed = time.monotonic() - started
        assert _no_descendants()
    assert result.stop_reason == "completed"
    assert result.text == SENTINEL
    assert result.diagnostic is None
    (request,) = fixture.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["authorization"] == f"Bearer {DEFAULT_FIXTURE_API_KEY}"
    assert [t for t in request.input_texts() if "TASK-MARKER" in t] == [TASK]
    assert request.model == DEFAULT_FIXTURE_MODEL  # omitted model: config.toml decides
    print(
        f"\nkeyless delegation: {elapsed:.3f} s start→result→tree exit; "
        f"tree peak RSS {rss.peak / 2**20:.1f} MiB"
    )


async def test_two_named_instances_reach_the_fixture_with_their_models(tmp_path: Path) -> None:
    with ResponsesFixture([PlainAnswer("one"), PlainAnswer("two")]) as fixture:
        # Each instance has its own CODEX_HOME: two app-servers initialising one fresh
        # CODEX_HOME at the same moment race on its sqlite state (observed on 0.163.0).
        first = _keyless(tmp_path / "a", fixture).provider(
            provider_name="codex-a", model="model-alpha"
        )
        keyless = _keyless(tmp_path / "b", fixture)
        second = keyless.provider(provider_name="codex-b", model="model-beta")
        results: dict[str, SubagentResult] = {}

        async def run(provider: CodexProvider) -> None:
            results[provider.name] = await _delegate(provider, keyless.workspace)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, first)
            tg.start_soon(run, second)
    assert {r.stop_reason for r in results.values()} == {"completed"}
    assert {r.text for r in results.values()} == {"one", "two"}
    assert sorted(r.model or "" for r in fixture.requests) == ["model-alpha", "model-beta"]


def _shell_call(command: str, *, escalate: bool) -> FunctionCall:
    # Codex versions advertise different shell tools; the fixture calls whichever is offered.
    escalation = (
        {"sandbox_permissions": "require_escalated", "justification": "test"} if escalate else {}
    )
    return FunctionCall(
        (
            ("exec_command", {"cmd": command, **escalation}),
            ("shell_command", {"command": command, **escalation}),
        )
    )


async def test_never_mode_does_not_run_an_escalated_command(tmp_path: Path) -> None:
    with ResponsesFixture() as fixture:
        # Ambient on-request is overridden by the thread-level "never".
        keyless = _keyless(tmp_path, fixture, approval_policy="on-request")
        target = keyless.workspace / "never-side-effect"
        fixture.enqueue(_shell_call(f"touch {target}", escalate=True), PlainAnswer("never done"))
        result = await _delegate(keyless.provider(permission_mode="never"), keyless.workspace)
    assert not target.exists()
    assert (result.stop_reason, result.text) == ("completed", "never done")
    assert len(fixture.requests) == 2


async def test_dangerous_bypass_runs_the_command(tmp_path: Path) -> None:
    with ResponsesFixture() as fixture:
        keyless = _keyless(tmp_path, fixture)
        target = keyless.root / "outside-workspace" / "bypass.txt"
        target.parent.mkdir()
        fixture.enqueue(
            _shell_call(f"printf bypass > {target}", escalate=False), PlainAnswer("bypass complete")
        )
        # Outside the cwd: confinement (on by default) allows it only as an added path.
        provider = keyless.provider(
            permission_mode="dangerously-bypass-approvals-and-sandbox",
            confinement=ConfinementSetting(write=(str(target.parent),)),
        )
        result = await _delegate(provider, keyless.workspace)
    assert (result.stop_reason, result.text) == ("completed", "bypass complete")
    assert target.read_text() == "bypass"


@pytest.mark.skipif(landlock_abi() == 0, reason="this kernel offers no Landlock")
async def test_a_confined_run_executes_the_rg_bundled_in_its_own_package(tmp_path: Path) -> None:
    # Codex reads its package's manifest at start and puts the package's codex-path/ (the
    # bundled rg) first on its commands' PATH (kept by a non-login shell): confined, the
    # whole package is readable and executable, not only its bin/.
    command = "command -v rg; rg --version"
    call = FunctionCall((("exec_command", {"cmd": command, "login": False}),))
    with ResponsesFixture([call, PlainAnswer("rg ran")]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        provider = keyless.provider(confinement=ConfinementSetting(mode="required"))
        result = await _delegate(provider, keyless.workspace)
    assert (result.stop_reason, result.text) == ("completed", "rg ran")
    (output,) = fixture.requests[1].function_call_outputs()
    assert "codex_cli_bin/codex-path/rg\n" in output
    assert "ripgrep " in output
    assert "Permission denied" not in output


async def test_approve_for_me_writes_inside_the_workspace_sandbox(tmp_path: Path) -> None:
    with ResponsesFixture() as fixture:
        keyless = _keyless(tmp_path, fixture)
        target = keyless.workspace / "approved.txt"
        fixture.enqueue(
            _shell_call(f"printf approved > {target}", escalate=False), PlainAnswer("approved run")
        )
        provider = keyless.provider(permission_mode="approve-for-me")
        result = await _delegate(provider, keyless.workspace)
    assert (result.stop_reason, result.text) == ("completed", "approved run")
    assert target.read_text() == "approved"  # workspace-write sandbox, no human asked
    assert len(fixture.requests) == 2


async def test_http_500_is_the_real_internal_server_error(tmp_path: Path) -> None:
    secret = "planted-fixture-secret-message"
    with ResponsesFixture([HttpError(500, secret)]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        result = await _delegate(keyless.provider(), keyless.workspace)
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)"
    )
    assert len(fixture.requests) == 1


async def test_cancellation_mid_turn_is_aborted_and_the_tree_exits(tmp_path: Path) -> None:
    with ResponsesFixture([Hold(then=PlainAnswer("too late"))]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        cancel = CancelController()
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                run = await keyless.provider().start(
                    make_request(tg, str(keyless.workspace), prompt=[TASK], cancel=cancel)
                )
                await anyio.to_thread.run_sync(fixture.wait_for_hold)
                cancel.cancel()
                result = await run.result()
                await run.dispose()
        assert _no_descendants()
    assert result.stop_reason == "aborted"
    assert result.diagnostic is None


async def test_delegation_through_the_subagent_service(tmp_path: Path) -> None:
    with ResponsesFixture([PlainAnswer(SENTINEL)]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        with anyio.fail_after(90):
            async with SubagentService() as service:
                service.register_provider(keyless.provider(provider_name="codex-svc"))
                run = await service.start(
                    "codex-svc",
                    SubagentStartRequest(
                        prompt=(TextBlock(text=TASK),),
                        parent=ParentContext(session_id="s", cwd=str(keyless.workspace)),
                    ),
                )
                result = await run.result()
                await run.dispose()
        assert _no_descendants()
    assert (result.stop_reason, result.text) == ("completed", SENTINEL)


async def test_parallel_delegations_on_one_fresh_codex_home_all_complete(tmp_path: Path) -> None:
    # Without the provider's first-start gate, 3 of 4 app-servers exit 1 at initialize here
    # ("failed to initialize sqlite state runtime"): they race on the fresh home's state.
    answers = [f"PARALLEL-ANSWER-{i}" for i in range(4)]
    with ResponsesFixture([PlainAnswer(answer) for answer in answers]) as fixture:
        keyless = _keyless(tmp_path, fixture)
        home = Path(keyless.env["CODEX_HOME"])
        assert os.listdir(home) == ["config.toml"], "the home must be fresh"
        provider = keyless.provider()
        results: list[SubagentResult] = []

        async def one(index: int) -> None:
            results.append(await _delegate(provider, keyless.workspace, f"{TASK} run {index}"))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for index in range(4):
                    tg.start_soon(one, index)
        assert _no_descendants()
        tasks = sorted(t for r in fixture.requests for t in r.input_texts() if "TASK-MARKER" in t)
    assert [r.stop_reason for r in results] == ["completed"] * 4, [r.diagnostic for r in results]
    assert sorted(r.text for r in results) == answers
    assert tasks == [f"{TASK} run {index}" for index in range(4)]
