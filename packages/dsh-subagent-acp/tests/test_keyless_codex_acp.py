"""Keyless real-agent tier: the pinned native codex-acp 0.16.0 against the loopback
Responses fixture, isolated in a temporary HOME/CODEX_HOME/TMPDIR, loopback only.

The agent comes from ``scripts/install-acp-agent`` (npm ``@zed-industries/codex-acp``).
These tests skip only when that script reports the npm registry unreachable; any other
installation problem fails them.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from acp_harness import make_request, pid_alive, started_run
from dsh_contract_tests.fixtures.responses import (
    DEFAULT_FIXTURE_API_KEY,
    FunctionCall,
    Hold,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import CancelController
from dsh_subagent_acp import AcpConfig, AcpProvider, PermissionPolicy
from dsh_subprocess.testing import host_descendants

INSTALLER = Path(__file__).resolve().parents[3] / "scripts" / "install-acp-agent"
REGISTRY_UNREACHABLE = 3
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
    done = subprocess.run(
        [str(INSTALLER)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode == REGISTRY_UNREACHABLE:
        pytest.skip(
            "npm registry unreachable: scripts/install-acp-agent could not install "
            "@zed-industries/codex-acp@0.16.0"
        )
    if done.returncode != 0:
        pytest.fail(f"scripts/install-acp-agent failed ({done.returncode}): {done.stderr}")
    binary = done.stdout.strip().splitlines()[-1]
    assert Path(binary).is_file(), binary
    return binary


def _provider(
    codex_acp: str,
    tmp_path: Path,
    fixture: ResponsesFixture,
    *,
    permission: PermissionPolicy = "reject",
    asks: bool = False,
) -> AcpProvider:
    env = codex_keyless_env(tmp_path / "root")
    if asks:
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
                controller.cancel()
                result = await run.result()
                await run.dispose()
    assert result.stop_reason == "aborted"
    assert result.diagnostic is None
    assert not [pid for pid in during if pid_alive(pid)], "a codex-acp process survived"
    assert len(fixture.requests) == 1
    assert TASK in fixture.requests[0].input_texts()
