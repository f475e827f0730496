"""Keyless tier of the known ACP agent profiles: answer, usage, cancel, host death, at rest.

Each shipped profile in ``KEYLESS_AGENTS`` runs its real agent (pinned npm package from
``scripts/install-acp-agent``, started as the profile says) against the loopback model
fixture of its wire, with every state directory under the test's root. For each agent:

* a task whose model first runs the agent's shell tool (``permission = "allow"``), then
  answers: the exact answer, the task and the layered key seen by the fixture, the tool
  really ran, the usage the agent reports (exactly the fixture's, or none — per agent);
* a held turn cancelled in process: ``aborted``, and the whole tree gone after dispose
  (the median of three cancel → tree-gone durations is printed; the evidence table's
  figure is what a user sees instead, Ctrl-C of ``dsh run``: test_acp_agents_ctrl_c.py);
* a host SIGKILLed mid-turn: no process of the agent's tree survives;
* after each, no file under the root holds the layered key or a layered service token.

The tests skip (visibly) only when the npm registry cannot be reached to install the
agent. Timings are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psutil
import pytest
from acp_agent import agent_or_skip
from acp_keyless import (
    KEYLESS_AGENTS,
    ModelFixture,
    ShellThenAnswer,
    agent_config,
    found_at_rest,
    hold,
)
from dsh_contract_tests.fixtures import loopback, messages
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_acp import AcpProvider, agent_profile
from dsh_subprocess import SpawnSpec, spawn
from dsh_subprocess.testing import alive, host_descendants, wait_gone

pytestmark = [pytest.mark.keyless, pytest.mark.anyio]

HOST = str(Path(__file__).with_name("credential_host.py"))
TASK = "Run the tool, then answer."  # what credential_host.py sends too
ANSWER = "ACP-AGENT-ANSWER-42"
MARKER = "tool-ran.txt"
DEADLINE = 120.0  # a failure bound for a loaded 2-core runner, never a timing

# What each agent states as the turn's usage when the model reported 123 input and
# 7 output tokens on each of the turn's two requests (the shell call, the answer):
# "sum" (246 / 14), "last" (123 / 7) or None (no usage on the prompt answer).
USAGE_IN, USAGE_OUT = 123, 7
REPORTS_USAGE: dict[str, str | None] = {
    "claude-agent-acp": "sum",
    "copilot": "sum",
    "gemini-cli": None,
    "opencode": "last",
    "qwen-code": None,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP library is asyncio-only


def _usage(wire: str) -> Any:
    if wire == "messages":
        return messages.TokenUsage(input_tokens=USAGE_IN, output_tokens=USAGE_OUT)
    return loopback.TokenUsage(USAGE_IN, USAGE_OUT)


class _Secrets:
    def __init__(self) -> None:
        self.api_key = f"sk-at-rest-{uuid.uuid4().hex}"
        self.token = f"at-rest-token-{uuid.uuid4().hex}"

    def needles(self) -> dict[str, str]:
        return {"api key": self.api_key, "SERVICE_TOKEN": self.token}


def _request(workspace: Path, cancel: CancelController | None = None) -> SubagentStartRequest:
    return SubagentStartRequest(
        prompt=(TextBlock(text=TASK),),
        parent=ParentContext(session_id="acp-agents", cwd=str(workspace)),
        cancel=(cancel or CancelController()).signal,
    )


def _workspace(root: Path) -> Path:
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    return workspace


@pytest.mark.parametrize("agent", KEYLESS_AGENTS)
async def test_a_tool_then_the_exact_answer_with_its_usage_and_nothing_at_rest(
    agent: str, tmp_path: Path
) -> None:
    profile = agent_profile(agent)
    entry = agent_or_skip(agent)
    secrets = _Secrets()
    root = tmp_path / "run"
    workspace = _workspace(root)
    wire = profile.keyless.wire
    route = ShellThenAnswer(wire, f"touch {MARKER}", ANSWER, _usage(wire))
    with ModelFixture(wire, route=route) as model:
        config = agent_config(
            agent,
            entry,
            root,
            model,
            api_key=secrets.api_key,
            env={"SERVICE_TOKEN": secrets.token},
            permission="allow",
        )
        with anyio.fail_after(DEADLINE):
            async with SubagentService() as service:
                service.register_provider(AcpProvider(config))
                run = await service.start(agent, _request(workspace))
                result: SubagentResult = await run.result()
                await run.dispose()
        requests = model.model_requests()
    print(f"\n{agent}: {len(requests)} model requests; usage {result.usage}")
    assert (result.stop_reason, result.text) == (COMPLETED, ANSWER), result.diagnostic
    assert (workspace / MARKER).exists(), "the shell tool never ran"
    assert any(model.carries(r, TASK) for r in requests)
    assert {model.api_key(r) for r in requests} == {secrets.api_key}
    stated = (
        None if result.usage is None else (result.usage.input_tokens, result.usage.output_tokens)
    )
    expected = {"sum": (2 * USAGE_IN, 2 * USAGE_OUT), "last": (USAGE_IN, USAGE_OUT)}
    assert stated == expected.get(REPORTS_USAGE[agent] or ""), result.usage
    assert not host_descendants()
    assert found_at_rest(root, secrets.needles()) == []


@pytest.mark.parametrize("agent", KEYLESS_AGENTS)
async def test_cancel_mid_turn_settles_aborted_and_the_whole_tree_is_gone(
    agent: str, tmp_path: Path
) -> None:
    profile = agent_profile(agent)
    entry = agent_or_skip(agent)
    secrets = _Secrets()
    durations: list[float] = []
    for attempt in range(3):
        root = tmp_path / f"run-{attempt}"
        workspace = _workspace(root)
        cancel = CancelController()
        with ModelFixture(profile.keyless.wire, route=lambda _r: hold(profile.keyless.wire)) as m:
            config = agent_config(
                agent,
                entry,
                root,
                m,
                api_key=secrets.api_key,
                env={"SERVICE_TOKEN": secrets.token},
            )
            with anyio.fail_after(DEADLINE):
                async with SubagentService() as service:
                    service.register_provider(AcpProvider(config))
                    run = await service.start(agent, _request(workspace, cancel))
                    await anyio.to_thread.run_sync(m.wait_for_hold, DEADLINE)
                    tree = host_descendants()
                    assert tree, "no agent process while the turn is held"
                    began = time.monotonic()
                    cancel.cancel()
                    result = await run.result()
                    await run.dispose()
                    left = await anyio.to_thread.run_sync(wait_gone, tree, DEADLINE)
                    durations.append(time.monotonic() - began)
        assert result.stop_reason == ABORTED
        assert result.diagnostic is None
        assert left == [], [f"{p.pid} {p.name()}" for p in alive(left)]
        assert found_at_rest(root, secrets.needles()) == []
    print(f"\n{agent}: cancel -> tree gone, median {statistics.median(durations):.2f} s")


@pytest.mark.parametrize("agent", KEYLESS_AGENTS)
async def test_host_sigkill_mid_turn_leaves_no_survivor_and_nothing_at_rest(
    agent: str, tmp_path: Path
) -> None:
    profile = agent_profile(agent)
    entry = agent_or_skip(agent)
    secrets = _Secrets()
    root = tmp_path / "run"
    workspace = _workspace(root)
    ready = tmp_path / "host-ready.json"
    with ModelFixture(profile.keyless.wire, route=lambda _r: hold(profile.keyless.wire)) as m:
        config = agent_config(
            agent, entry, root, m, api_key=secrets.api_key, env={"SERVICE_TOKEN": secrets.token}
        )
        spec = tmp_path / "host-spec.json"
        spec.write_text(
            json.dumps(
                {
                    "type": "acp",
                    "config": config.model_dump(mode="json"),
                    "workspace": str(workspace),
                    "ready": str(ready),
                }
            ),
            encoding="utf-8",
        )
        host_stderr: deque[str] = deque(maxlen=200)
        # Unguarded: the host's own death is what is being tested.
        host = await spawn(
            SpawnSpec(
                argv=(sys.executable, HOST, str(spec)),
                cwd=str(tmp_path),
                stdin="devnull",
                stdout="devnull",
                host_death_guard=False,
                grace=0.5,
            ),
            stderr_observer=host_stderr.append,
        )
        try:
            with anyio.fail_after(DEADLINE):
                while not ready.exists() and host.exit_facts is None:  # noqa: ASYNC110 - another process writes it
                    await anyio.sleep(0.02)
            assert host.exit_facts is None, "\n".join(host_stderr)
            await anyio.to_thread.run_sync(m.wait_for_hold, DEADLINE)
            tree = psutil.Process(host.pid).children(recursive=True)
            assert tree, "no agent process while the turn is held"
            os.kill(host.pid, signal.SIGKILL)
            await host.wait()
            survivors = await anyio.to_thread.run_sync(wait_gone, tree, DEADLINE)
        finally:
            await host.terminate()
    print(f"\n{agent}: host SIGKILL -> {len(survivors)} survivors of {len(tree)} processes")
    assert survivors == [], [f"{p.pid} {p.name()}" for p in alive(survivors)]
    assert found_at_rest(root, secrets.needles()) == []
