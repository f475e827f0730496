"""End-to-end runs against the scripted ACP agent: answers, stop reasons, protocol rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_harness import Scripted, delegate, started_run


# The acp library's connection is asyncio-only (asyncio futures and tasks throughout);
# the trio behaviour of the provider is pinned in test_backend.py.
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio


async def test_streamed_chunks_are_the_answer(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {
            "prompt": [
                {"thought": "THINKING"},
                {"chunk": "FAKE-"},
                {"foreign_chunk": "OTHER-SESSION"},
                {"image_chunk": True},
                {"chunk": "ANSWER: 42"},
            ]
        },
    )
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "completed"
    assert result.text == "FAKE-ANSWER: 42"
    assert len(result.output) == 1
    assert result.diagnostic is None


async def test_task_text_reaches_agent_unchanged(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    task = "Compute 6*7.\nAnswer exactly: FAKE-ANSWER: 42 — ünïcode"
    await delegate(agent.provider(), cwd=str(agent.workspace), prompt=(task, "second block"))
    (prompt,) = agent.frames("incoming", "session/prompt")
    assert prompt["params"]["prompt"] == [
        {"type": "text", "text": task},
        {"type": "text", "text": "second block"},
    ]


async def test_sequence_and_no_capabilities_advertised(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    await delegate(agent.provider(), cwd=str(agent.workspace))
    methods = [f["method"] for f in agent.frames("incoming") if "method" in f]
    assert methods[:3] == ["initialize", "session/new", "session/prompt"]
    (init,) = agent.frames("incoming", "initialize")
    caps = init["params"].get("clientCapabilities", {})
    assert caps.get("terminal", False) is False
    fs = caps.get("fs", {})
    assert fs.get("readTextFile", False) is False
    assert fs.get("writeTextFile", False) is False
    assert init["params"]["protocolVersion"] == 1
    (new,) = agent.frames("incoming", "session/new")
    assert new["params"] == {"cwd": str(agent.workspace), "mcpServers": []}
    assert "authenticate" not in methods


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("fs/read_text_file", {"sessionId": "s", "path": "/etc/passwd"}),
        ("fs/write_text_file", {"sessionId": "s", "path": "/tmp/x", "content": "x"}),
        ("terminal/create", {"sessionId": "s", "command": "rm"}),
        ("terminal/output", {"sessionId": "s", "terminalId": "t"}),
        ("terminal/release", {"sessionId": "s", "terminalId": "t"}),
        ("terminal/wait_for_exit", {"sessionId": "s", "terminalId": "t"}),
        ("terminal/kill", {"sessionId": "s", "terminalId": "t"}),
        ("elicitation/create", {"sessionId": "s", "message": "?"}),
        ("made/up", {}),
        ("_vendor/extension", {}),
    ],
)
async def test_agent_requests_are_refused(
    tmp_path: Path, method: str, params: dict[str, Any]
) -> None:
    agent = Scripted(
        tmp_path, {"prompt": [{"request": method, "params": params}, {"chunk": "still here"}]}
    )
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "completed"
    (refused,) = agent.events("request_error")
    assert refused["method"] == method
    assert refused["code"] == -32601
    assert agent.events("request_result") == []


@pytest.mark.parametrize(
    ("steps", "stop_reason"),
    [
        ([{"chunk": "partial"}, {"stop": "max_tokens"}], "max-tokens"),
        ([{"chunk": "I won't"}, {"stop": "refusal"}], "refusal"),
        ([{"chunk": "partial"}, {"stop": "cancelled"}], "aborted"),
    ],
)
async def test_stop_reasons_end_to_end(
    tmp_path: Path, steps: list[dict[str, Any]], stop_reason: str
) -> None:
    agent = Scripted(tmp_path, {"prompt": steps})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == stop_reason
    assert result.text == steps[0]["chunk"]
    assert result.diagnostic is None


async def test_max_turn_requests_is_error_with_its_category(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "so far"}, {"stop": "max_turn_requests"}]})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "error"
    assert result.text == "so far"
    assert result.diagnostic == (
        "Product subagent failure (product: ACP; stage: prompt; category: max-turn-requests)"
    )


@pytest.mark.parametrize("steps", [[], [{"chunk": "  \n "}], [{"thought": "only thinking"}]])
async def test_end_turn_needs_a_non_blank_answer(
    tmp_path: Path, steps: list[dict[str, Any]]
) -> None:
    agent = Scripted(tmp_path, {"prompt": steps})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "Product subagent failure (product: ACP; stage: prompt; category: blank-answer)"
    )


CODEX_OPTIONS = [
    {"optionId": "approved", "kind": "allow_once"},
    {"optionId": "approved-execpolicy-amendment", "kind": "allow_always"},
    {"optionId": "abort", "kind": "reject_once"},
]


async def test_reject_policy_selects_the_reject_option_and_the_turn_goes_on(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path, {"prompt": [{"permission": CODEX_OPTIONS}, {"chunk": "did without"}]}
    )
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    (decision,) = agent.events("permission_outcome")
    assert decision["outcome"] == {"outcome": "selected", "optionId": "abort"}
    assert result.stop_reason == "completed"
    assert result.text == "did without"


async def test_reject_policy_without_reject_option_cancels_the_request(tmp_path: Path) -> None:
    options = [{"optionId": "yes", "kind": "allow_once"}]
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "before"}, {"permission": options}]})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    (decision,) = agent.events("permission_outcome")
    assert decision["outcome"] == {"outcome": "cancelled"}
    # This agent ends its turn "cancelled" on a cancelled permission: that maps to aborted.
    assert result.stop_reason == "aborted"
    assert result.text == "before"


async def test_allow_policy_selects_allow_once(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"permission": CODEX_OPTIONS}, {"chunk": "done"}]})
    result = await delegate(agent.provider(permission="allow"), cwd=str(agent.workspace))
    (decision,) = agent.events("permission_outcome")
    assert decision["outcome"] == {"outcome": "selected", "optionId": "approved"}
    assert result.stop_reason == "completed"


async def test_permission_fact_accompanies_a_failure(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path,
        {
            "prompt": [
                {"permission": CODEX_OPTIONS},
                {"permission": CODEX_OPTIONS},
                {"stop": "max_turn_requests"},
            ]
        },
    )
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.diagnostic == (
        "Product subagent failure (product: ACP; stage: prompt; category: max-turn-requests)\n"
        "ACP unattended decision (policy: reject; requests: 2; approved: 0)"
    )


async def test_cwd_inherited_from_parent_session(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    await delegate(agent.provider(), cwd=str(agent.workspace))
    assert agent.started()["cwd"] == str(agent.workspace)


async def test_configured_cwd_wins_over_parent(tmp_path: Path) -> None:
    override = tmp_path / "override"
    override.mkdir()
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    await delegate(agent.provider(cwd=str(override)), cwd=str(agent.workspace))
    assert agent.started()["cwd"] == str(override)
    (new,) = agent.frames("incoming", "session/new")
    assert new["params"]["cwd"] == str(override)


async def test_environment_is_scrubbed_and_overlaid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-secret")
    monkeypatch.setenv("DSH_PERMISSION_MODE", "ambient")
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    env = {"FAKE_API_KEY": "explicit-key", "DSH_PERMISSION_MODE": "explicit"}
    await delegate(agent.provider(env=env), cwd=str(agent.workspace))
    seen = agent.started()["env"]
    assert "OPENAI_API_KEY" not in seen
    assert seen["FAKE_API_KEY"] == "explicit-key"
    assert seen["DSH_PERMISSION_MODE"] == "explicit"


async def test_run_ids_are_fresh_and_not_the_session_id(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    provider = agent.provider()
    ids = []
    for _ in range(2):
        async with started_run(provider, cwd=str(agent.workspace)) as run:
            await run.result()
            ids.append(run.id)
    sessions = {
        f["result"]["sessionId"]
        for f in agent.frames("outgoing")
        if "sessionId" in f.get("result", {})
    }
    assert len(set(ids)) == 2
    assert not set(ids) & sessions


async def test_concurrent_runs_are_isolated(tmp_path: Path) -> None:
    agents = [Scripted(tmp_path, {"prompt": [{"chunk": f"ANSWER-{i}"}]}) for i in range(3)]
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        result = await delegate(
            agents[i].provider(), cwd=str(agents[i].workspace), prompt=f"task {i}"
        )
        results[i] = result.text

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(one, i)
    assert results == {0: "ANSWER-0", 1: "ANSWER-1", 2: "ANSWER-2"}
    pids = {agent.started()["pid"] for agent in agents}
    assert len(pids) == 3
    for i, agent in enumerate(agents):
        (prompt,) = agent.frames("incoming", "session/prompt")
        assert prompt["params"]["prompt"][0]["text"] == f"task {i}"


async def test_cooperative_agent_exits_on_eof_without_signals(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    provider = agent.provider(dispose_eof_grace=10.0)
    with anyio.fail_after(20):
        async with started_run(provider, cwd=str(agent.workspace)) as run:
            await run.result()
    assert agent.events("stdin_eof"), "the agent saw EOF and exited by itself"
    assert not _alive(agent.started()["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
