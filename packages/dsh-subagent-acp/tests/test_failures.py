"""Startup and published failures: safe lines with stage, category, exit code and signal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_harness import Scripted, delegate, make_request, pid_alive, started_run
from dsh_subagent import (
    ProductChild,
    ProductStartError,
    SubagentError,
    SubagentErrorCode,
    TextBlock,
)
from dsh_subagent_acp import AcpConfig, AcpProvider


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio

SECRET = "sk-planted-SECRET-do-not-leak /home/alice/.config/token"
LINE = "Product subagent failure (product: ACP; stage: {stage}; category: {category}{extra})"


async def _start_error(agent: Scripted, **overrides: Any) -> ProductStartError:
    provider = agent.provider(**overrides)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ProductStartError) as caught:
                await provider.start(make_request(tg, cwd=str(agent.workspace)))
    return caught.value


STARTUP_CASES = [
    ({"do": "exit", "code": 3}, "process-exit", "; exit code: 3"),
    ({"do": "signal", "signal": "SIGKILL"}, "process-exit", "; signal: SIGKILL"),
    ({"do": "signal", "signal": "SIGSEGV"}, "process-exit", "; signal: SIGSEGV"),
    ({"do": "malformed", "malformed": SECRET}, "malformed-frame", ""),
    ({"do": "error", "message": SECRET}, "error-response", ""),
]


@pytest.mark.parametrize("stage_key", ["initialize", "session_new"])
@pytest.mark.parametrize(("action", "category", "extra"), STARTUP_CASES)
async def test_startup_failures(
    tmp_path: Path, stage_key: str, action: dict[str, Any], category: str, extra: str
) -> None:
    agent = Scripted(tmp_path, {stage_key: action})
    error = await _start_error(agent)
    stage = "initialize" if stage_key == "initialize" else "session-new"
    assert error.message == "subagent-acp: " + LINE.format(
        stage=stage, category=category, extra=extra
    )
    assert error.code == SubagentErrorCode.PRODUCT_START_FAILED
    assert error.rollback_failed is False
    assert "SECRET" not in str(error)
    assert agent.events("started"), "the agent was started and rolled back"


async def test_missing_session_id_is_an_invalid_response(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"session_new": {"do": "no_session_id"}})
    error = await _start_error(agent)
    assert error.message == "subagent-acp: " + LINE.format(
        stage="session-new", category="invalid-response", extra=""
    )


async def test_other_protocol_version_is_refused(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"initialize": {"do": "protocol_version", "value": 99}})
    error = await _start_error(agent)
    assert error.message == "subagent-acp: " + LINE.format(
        stage="initialize", category="protocol-version", extra=""
    )


async def test_spawn_failure(tmp_path: Path) -> None:
    provider = AcpProvider(AcpConfig(command=str(tmp_path / "no-such-agent")))
    async with anyio.create_task_group() as tg:
        with pytest.raises(ProductStartError) as caught:
            await provider.start(make_request(tg, cwd=str(tmp_path)))
    # The runtime's own stage for a program that could not be started (was "initialize").
    assert caught.value.message == "subagent-acp: " + LINE.format(
        stage="spawn", category="spawn-failed", extra=""
    )
    assert str(tmp_path) not in caught.value.message


PROMPT_CASES = [
    ({"exit": 5}, "process", "process-exit", "; exit code: 5"),
    ({"exit": 0}, "process", "process-exit", "; exit code: 0"),
    ({"signal": "SIGKILL"}, "process", "process-exit", "; signal: SIGKILL"),
    ({"signal": "SIGABRT"}, "process", "process-exit", "; signal: SIGABRT"),
    ({"malformed": SECRET}, "prompt", "malformed-frame", ""),
    ({"malformed": '{"jsonrpc": "2.0"}'}, "prompt", "malformed-frame", ""),
    ({"malformed": "[1, 2, 3]"}, "prompt", "malformed-frame", ""),
    ({"malformed": "null"}, "prompt", "malformed-frame", ""),
    ({"error": SECRET}, "prompt", "error-response", ""),
]


@pytest.mark.parametrize(("step", "stage", "category", "extra"), PROMPT_CASES)
async def test_published_failures_settle_error(
    tmp_path: Path, step: dict[str, Any], stage: str, category: str, extra: str
) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "partial "}, step]})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "error"
    assert result.text == "partial "
    assert result.diagnostic == LINE.format(stage=stage, category=category, extra=extra)


async def test_failure_log_line_is_the_safe_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"error": SECRET}]})
    with caplog.at_level("WARNING", logger="dsh_subagent"):
        async with started_run(
            agent.provider(provider_name="acp-x"), cwd=str(agent.workspace)
        ) as run:
            await run.result()
    (record,) = [r for r in caplog.records if r.name == "dsh_subagent"]
    assert record.getMessage() == (
        f'subagent-acp "acp-x": run {run.id} failed (error): '
        + LINE.format(stage="prompt", category="error-response", extra="")
    )
    assert "SECRET" not in caplog.text


async def test_agent_death_mid_turn_with_escaped_grandchild(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"grandchild": True, "prompt": [{"signal": "SIGTERM"}]})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.diagnostic == LINE.format(
        stage="process", category="process-exit", extra="; signal: SIGTERM"
    )
    assert not pid_alive(agent.started()["grandchild"])


async def test_descendant_holding_stdout_does_not_hang_the_run(tmp_path: Path) -> None:
    # The agent dies but its setsid grandchild keeps stdout open: no EOF ever comes, so
    # the run settles from the agent's own exit facts after a short drain window.
    agent = Scripted(
        tmp_path, {"grandchild": "keeps-stdout", "prompt": [{"chunk": "so far"}, {"exit": 9}]}
    )
    with anyio.fail_after(15):
        result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "error"
    assert result.text == "so far"
    assert result.diagnostic == LINE.format(
        stage="process", category="process-exit", extra="; exit code: 9"
    )
    assert not pid_alive(agent.started()["grandchild"])


async def test_descendant_holding_stdout_at_startup(tmp_path: Path) -> None:
    agent = Scripted(
        tmp_path, {"grandchild": "keeps-stdout", "session_new": {"do": "exit", "code": 4}}
    )
    error = await _start_error(agent)
    assert error.message == "subagent-acp: " + LINE.format(
        stage="session-new", category="process-exit", extra="; exit code: 4"
    )
    assert not pid_alive(agent.started()["grandchild"])


async def test_no_working_directory_anywhere(tmp_path: Path) -> None:
    agent = Scripted(tmp_path)
    provider = agent.provider()
    async with anyio.create_task_group() as tg:
        with pytest.raises(SubagentError) as caught:
            await provider.start(make_request(tg, cwd=None))
    assert caught.value.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert "configure `cwd`" in caught.value.message
    assert agent.events("started") == []


@pytest.mark.parametrize("kind", ["relative", "missing", "file"])
async def test_unusable_parent_cwd_refused_before_spawn_without_the_path(
    tmp_path: Path, kind: str
) -> None:
    agent = Scripted(tmp_path)
    secret_dir = tmp_path / "alice-private"
    if kind == "file":
        secret_dir.write_text("x")
    cwd = "alice-private" if kind == "relative" else str(secret_dir)
    async with anyio.create_task_group() as tg:
        with pytest.raises(SubagentError) as caught:
            await agent.provider().start(make_request(tg, cwd=cwd))
    assert caught.value.code == SubagentErrorCode.NO_WORKING_DIRECTORY
    assert "alice-private" not in caught.value.message
    assert "alice-private" in str(caught.value.__cause__)
    assert agent.events("started") == []


# Unlike the reference provider (which silently dropped non-text blocks), the task is
# validated like Codex's: a task the agent would see as empty is a caller error.
@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ((), "subagent-acp: the one-shot task must contain only text blocks"),
        (
            # Not constructible through the public model: built raw, as a foreign caller might.
            (TextBlock(text="task"), TextBlock.model_construct(type="image", text="")),  # type: ignore[arg-type]
            "subagent-acp: the one-shot task must contain only text blocks",
        ),
        (
            (TextBlock(text=""), TextBlock(text=" \n\t")),
            "subagent-acp: the one-shot task must not be empty",
        ),
    ],
    ids=["empty", "non-text", "blank"],
)
async def test_invalid_tasks_are_refused_before_spawn(
    tmp_path: Path, prompt: tuple[TextBlock, ...], message: str
) -> None:
    agent = Scripted(tmp_path)
    provider = agent.provider()
    async with anyio.create_task_group() as tg:
        request = make_request(tg, cwd=str(agent.workspace)).model_copy(update={"prompt": prompt})
        with pytest.raises(SubagentError) as caught:
            await provider.start(request)
    assert (caught.value.code, caught.value.message) == (SubagentErrorCode.INVALID_REQUEST, message)
    assert agent.events("started") == []


async def test_a_blank_block_beside_text_is_kept(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    await delegate(agent.provider(), cwd=str(agent.workspace), prompt=("one", " ", "two"))
    (prompt,) = agent.frames("incoming", "session/prompt")
    assert [block["text"] for block in prompt["params"]["prompt"]] == ["one", " ", "two"]


RESPONSE_BOUND = 0.5


@pytest.mark.parametrize("stage_key", ["initialize", "session_new"])
async def test_a_startup_request_never_answered_fails_at_the_response_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage_key: str
) -> None:
    # An agent that cannot read a request may never answer it: without the bound the
    # start waits forever. The whole tree is gone when start() raises.
    stage = "initialize" if stage_key == "initialize" else "session-new"

    def deadline(self: ProductChild) -> float:
        # Only the stage under test gets the short bound: the bound of initialize also
        # covers the agent's startup, which takes seconds on a loaded machine.
        return anyio.current_time() + (RESPONSE_BOUND if self.stage == stage else 600.0)

    monkeypatch.setattr(ProductChild, "response_deadline", deadline)
    agent = Scripted(tmp_path, {stage_key: {"do": "hang"}})
    error = await _start_error(agent)
    assert error.message == "subagent-acp: " + LINE.format(
        stage=stage, category="response-timeout", extra=""
    )
    started = agent.events("started")
    assert not started or not pid_alive(started[0]["pid"])
