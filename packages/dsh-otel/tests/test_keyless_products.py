"""The real Codex and Claude Code, keyless, traced: span tree, attributes and metrics.

Each product runs its pinned binary against a loopback model fixture in a temporary home.
Secrets are planted everywhere a run carries text (the task, the answer, a tool's command
and output, an environment value, a workspace path) and none may appear in anything the
in-memory SDK received.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from dsh_contract_tests.fixtures import messages
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES
from dsh_contract_tests.fixtures.messages import Hold as MessagesHold
from dsh_contract_tests.fixtures.messages import HttpError as MessagesHttpError
from dsh_contract_tests.fixtures.messages import (
    MessagesFixture,
    TextAnswer,
    TokenUsage,
    ToolUse,
    keyless_claude_home,
)
from dsh_contract_tests.fixtures.responses import (
    Behaviour,
    FunctionCall,
    Hold,
    PlainAnswer,
    ResponsesFixture,
    ResponseUsage,
    codex_keyless_env,
    write_codex_config,
)
from dsh_contract_tests.fixtures.responses import HttpError as ResponsesHttpError
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    Budget,
    CancelController,
    ConfinementSetting,
    ProgressEvent,
    SubagentProvider,
    SubagentResult,
    TurnStarted,
    delegate,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import ProcessWatch
from dsh_worktree import Worktree
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from otel_capture import Captured

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

TASK_SECRET = "TASK-SECRET-7f3a"
ANSWER_SECRET = "ANSWER-SECRET-91bc"
COMMAND_SECRET = "COMMAND-SECRET-44de"
ENV_SECRET = "ENV-SECRET-0a5f"
PATH_SECRET = "PATHSECRET2b7c"
SECRETS = (TASK_SECRET, ANSWER_SECRET, COMMAND_SECRET, ENV_SECRET, PATH_SECRET)
TASK = f"Run the scripted steps ({TASK_SECRET})."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the real-product tier runs once


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / PATH_SECRET / "workspace"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def no_ambient_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _codex(tmp_path: Path, fixture: ResponsesFixture, **config: Any) -> CodexProvider:
    env = {**codex_keyless_env(tmp_path / "codex-home"), "PLANTED_VALUE": ENV_SECRET}
    write_codex_config(env["CODEX_HOME"], fixture.base_url)
    config.setdefault("dispose_grace", 2.0)
    return CodexProvider(
        CodexConfig(env=env, permission_mode="dangerously-bypass-approvals-and-sandbox", **config)
    )


def _claude(tmp_path: Path, fixture: MessagesFixture) -> ClaudeCodeProvider:
    home = keyless_claude_home(tmp_path / "claude-home", fixture.base_url)
    env: dict[str, str | None] = {**home.env, "PLANTED_VALUE": ENV_SECRET}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # the CLI refuses bypassPermissions as root otherwise
    # The mid-tool tests' tool reports its pid in tmp_path, outside the workspace: the
    # instance grants it, as a user grants a product's extra path.
    return ClaudeCodeProvider(
        ClaudeCodeConfig(
            env=env,
            model="claude-haiku-4-5",
            permission_mode="bypassPermissions",
            confinement=ConfinementSetting(write=(str(tmp_path),)),
        )
    )


async def _delegate(
    provider: SubagentProvider,
    workspace: Path,
    *,
    budget: Budget | None = None,
    cancel_on_turn: bool = False,
    cancel_when: Callable[[], Awaitable[object]] | None = None,
) -> tuple[SubagentResult, list[str]]:
    """Delegate; return the result and the processes that outlived it.

    ``cancel_when``: cancel the run once this returns (it runs alongside the run).
    """
    cancel = CancelController()

    def on_progress(event: ProgressEvent) -> None:
        if cancel_on_turn and isinstance(event, TurnStarted):
            cancel.cancel("test cancels at the first turn")

    async def cancel_after(condition: Callable[[], Awaitable[object]]) -> None:
        await condition()
        cancel.cancel("test cancels")

    with ProcessWatch() as watch:
        with anyio.fail_after(180):
            async with anyio.create_task_group() as tasks:
                if cancel_when is not None:
                    tasks.start_soon(cancel_after, cancel_when)
                result = await delegate(
                    provider,
                    TASK,
                    cwd=workspace,
                    budget=budget,
                    cancel=cancel.signal,
                    on_progress=on_progress,
                    progress_commands=True,
                )
                tasks.cancel_scope.cancel()
        return result, [p.name for p in watch.alive()]


def _one_delegation(captured: Captured) -> tuple[ReadableSpan, dict[str, Any]]:
    (span,) = captured.delegations()
    return span, dict(span.attributes or {})


def _stages(start: ReadableSpan) -> list[object]:
    """The startup stages the ``dsh.start`` span recorded, in order."""
    return [
        dict(e.attributes or {}).get("dsh.stage") for e in start.events if e.name == "dsh.stage"
    ]


def _assert_nothing_secret(captured: Captured) -> None:
    exported = captured.exported_strings()
    assert exported, "nothing was exported"
    leaked = [s for s in exported for secret in SECRETS if secret in s]
    assert leaked == []


async def test_codex_completed_with_a_tool(
    tmp_path: Path, workspace: Path, captured: Captured
) -> None:
    command = f"echo {COMMAND_SECRET} $PLANTED_VALUE"
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": command}),), ResponseUsage(1200, 80, 1000, 30)),
        PlainAnswer(f"done {ANSWER_SECRET}", usage=ResponseUsage(1300, 20, 1200)),
    ]
    with ResponsesFixture(script) as fixture:
        result, survivors = await _delegate(_codex(tmp_path, fixture), workspace)
        assert ENV_SECRET in fixture.requests[1].raw_body.decode()  # the tool did print it
    assert (result.stop_reason, survivors) == (COMPLETED, [])
    span, attributes = _one_delegation(captured)
    assert span.name == "invoke_agent codex"
    assert span.status.status_code is StatusCode.OK
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["dsh.product"] == "codex"
    assert attributes["gen_ai.usage.input_tokens"] == 2500
    assert attributes["gen_ai.usage.output_tokens"] == 100
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 2200
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == 30
    assert attributes["dsh.tools"] == 1
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert ("dsh.turn.started", {}) in events
    assert (
        "dsh.tool.started",
        {"dsh.tool.kind": "command", "dsh.tool.name": "commandExecution"},
    ) in events
    assert set(captured.children(span)) == {"dsh.start", "dsh.teardown"}
    assert _stages(captured.children(span)["dsh.start"]) == ["launch", "spawn", "initialize"]
    tokens = captured.metric("gen_ai.client.token.usage")
    assert tokens is not None
    assert sorted(p.sum for p in tokens.data.data_points) == [100, 2500]  # type: ignore[union-attr]
    _assert_nothing_secret(captured)


async def test_codex_failed(tmp_path: Path, workspace: Path, captured: Captured) -> None:
    with ResponsesFixture([ResponsesHttpError(400, f"bad request {TASK_SECRET}")]) as fixture:
        result, survivors = await _delegate(_codex(tmp_path, fixture), workspace)
    assert (result.stop_reason, survivors) == (ERROR, [])
    span, attributes = _one_delegation(captured)
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["dsh.stop_reason"] == ERROR
    assert attributes["dsh.diagnostic.stage"] == "turn"
    assert attributes["error.type"] == attributes.get("dsh.diagnostic.category", ERROR)
    (count,) = captured.sum_points("dsh.delegations")
    assert dict(count.attributes or {})["error.type"] == attributes["error.type"]
    _assert_nothing_secret(captured)


async def test_codex_budget_expired(tmp_path: Path, workspace: Path, captured: Captured) -> None:
    with ResponsesFixture([Hold(then=PlainAnswer("too late"))]) as fixture:
        result, survivors = await _delegate(
            _codex(tmp_path, fixture), workspace, budget=Budget(deadline_seconds=5.0)
        )
    assert (result.stop_reason, survivors) == (ERROR, [])
    _, attributes = _one_delegation(captured)
    assert attributes["dsh.budget.outcome"] == "deadline-exceeded"
    assert attributes["error.type"] == "deadline-exceeded"
    assert attributes["dsh.diagnostic.stage"] == "turn"
    _assert_nothing_secret(captured)


async def test_codex_cancelled(tmp_path: Path, workspace: Path, captured: Captured) -> None:
    with ResponsesFixture([Hold(then=PlainAnswer("never"))]) as fixture:
        result, survivors = await _delegate(
            _codex(tmp_path, fixture), workspace, cancel_on_turn=True
        )
    assert (result.stop_reason, survivors) == (ABORTED, [])
    span, attributes = _one_delegation(captured)
    assert attributes["dsh.stop_reason"] == ABORTED
    assert span.status.status_code is StatusCode.UNSET
    teardown = captured.children(span)["dsh.teardown"]
    assert teardown.status.status_code is StatusCode.UNSET
    assert captured.sum_points("dsh.delegations.live")[0].value == 0


async def test_claude_code_completed_with_a_tool(
    tmp_path: Path, workspace: Path, captured: Captured, no_ambient_model: None
) -> None:
    script: list[messages.Behaviour] = [
        ToolUse("Bash", {"command": f"echo {COMMAND_SECRET} $PLANTED_VALUE"}),
        TextAnswer(f"done {ANSWER_SECRET}", TokenUsage(input_tokens=50, output_tokens=9)),
    ]
    with MessagesFixture(script) as fixture:
        result, survivors = await _delegate(_claude(tmp_path, fixture), workspace)
    assert (result.stop_reason, survivors) == (COMPLETED, [])
    span, attributes = _one_delegation(captured)
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["dsh.product"] == "claude-code"
    assert attributes["gen_ai.usage.output_tokens"] >= 9
    assert "dsh.cost_usd" in attributes
    names = {dict(e.attributes or {}).get("dsh.tool.name") for e in span.events}
    assert "Bash" in names
    assert _stages(captured.children(span)["dsh.start"]) == ["launch", "spawn", "query-start"]
    assert captured.sum_points("dsh.delegation.cost")[0].value > 0
    _assert_nothing_secret(captured)


async def test_claude_code_failed(
    tmp_path: Path, workspace: Path, captured: Captured, no_ambient_model: None
) -> None:
    with MessagesFixture(default=MessagesHttpError(400, message=TASK_SECRET)) as fixture:
        result, survivors = await _delegate(_claude(tmp_path, fixture), workspace)
    assert (result.stop_reason, survivors) == (ERROR, [])
    span, attributes = _one_delegation(captured)
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["dsh.product"] == "claude-code"
    assert "dsh.diagnostic.stage" in attributes
    _assert_nothing_secret(captured)


# A Bash tool that writes its pid to {target}, then sleeps in the CLI's tree until ended.
_SLEEPER = "echo $$ > {target}; exec sleep 300 # " + COMMAND_SECRET


def _assert_gone(pid: int) -> None:
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    assert process.status() == psutil.STATUS_ZOMBIE, f"tool {pid} survived the run"


class _ToolStarted:
    """A FIFO the sleeper tool writes its pid to: the test wakes when the tool runs."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self.pid: int | None = None

    async def wait(self) -> None:
        data = b""
        while not data.endswith(b"\n"):
            await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, 64)
            assert chunk, "the tool closed the FIFO without writing its pid"
            data += chunk
        self.pid = int(data)


@contextmanager
def _tool_started(tmp_path: Path) -> Iterator[_ToolStarted]:
    path = tmp_path / "tool-started"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opened first, so the tool's echo never blocks
    try:
        yield _ToolStarted(path, fd)
    finally:
        os.close(fd)


def _point(captured: Captured, name: str) -> tuple[Any, dict[str, Any]]:
    """The one data point of metric ``name`` and its attributes."""
    metric = captured.metric(name)
    assert metric is not None, f"no metric {name}"
    (point,) = metric.data.data_points
    return point, dict(point.attributes or {})


async def test_claude_code_cancelled_mid_tool(
    tmp_path: Path, workspace: Path, captured: Captured, no_ambient_model: None
) -> None:
    with _tool_started(tmp_path) as tool, MessagesFixture() as fixture:
        fixture.enqueue(
            ToolUse("Bash", {"command": _SLEEPER.format(target=tool.path)}),
            MessagesHold(then=TextAnswer(f"never {ANSWER_SECRET}")),
        )
        provider = _claude(tmp_path, fixture)
        result, survivors = await _delegate(provider, workspace, cancel_when=tool.wait)
    assert (result.stop_reason, survivors) == (ABORTED, [])
    assert tool.pid is not None  # cancelled while the tool ran in the CLI's tree
    _assert_gone(tool.pid)
    span, attributes = _one_delegation(captured)
    assert attributes["dsh.product"] == "claude-code"
    assert attributes["dsh.stop_reason"] == ABORTED
    assert attributes["gen_ai.response.finish_reasons"] == (ABORTED,)
    assert span.status.status_code is StatusCode.UNSET  # the caller's decision, no failure
    assert "error.type" not in attributes
    assert "dsh.budget.outcome" not in attributes
    assert ("dsh.tool.started", {"dsh.tool.kind": "command", "dsh.tool.name": "Bash"}) in [
        (e.name, dict(e.attributes or {})) for e in span.events
    ]
    teardown = captured.children(span)["dsh.teardown"]
    assert teardown.status.status_code is StatusCode.UNSET
    count, dimensions = _point(captured, "dsh.delegations")
    assert count.value == 1
    assert dimensions["dsh.stop_reason"] == ABORTED
    assert dimensions["gen_ai.provider.name"] == "anthropic"
    assert "error.type" not in dimensions
    duration, dimensions = _point(captured, "gen_ai.client.operation.duration")
    assert (duration.count, dimensions["dsh.stop_reason"]) == (1, ABORTED)
    assert duration.sum > 0
    assert captured.sum_points("dsh.delegations.live")[0].value == 0
    _assert_nothing_secret(captured)


async def test_claude_code_budget_expired_mid_tool(
    tmp_path: Path, workspace: Path, captured: Captured, no_ambient_model: None
) -> None:
    pidfile = tmp_path / "tool.pid"
    script: list[messages.Behaviour] = [
        ToolUse("Bash", {"command": _SLEEPER.format(target=pidfile)}),
        MessagesHold(then=TextAnswer(f"too late {ANSWER_SECRET}")),
    ]
    deadline = 5.0  # past the CLI's startup on a loaded machine, so the tool runs first
    with MessagesFixture(script) as fixture:
        provider = _claude(tmp_path, fixture)
        result, survivors = await _delegate(
            provider, workspace, budget=Budget(deadline_seconds=deadline)
        )
    assert (result.stop_reason, survivors) == (ERROR, [])
    assert pidfile.exists(), "the deadline fired before the tool ran"
    _assert_gone(int(pidfile.read_text(encoding="utf-8")))
    span, attributes = _one_delegation(captured)
    assert attributes["dsh.product"] == "claude-code"
    assert attributes["dsh.stop_reason"] == ERROR
    assert attributes["dsh.budget.outcome"] == "deadline-exceeded"
    assert attributes["dsh.diagnostic.category"] == "deadline-exceeded"
    assert attributes["dsh.diagnostic.stage"] == "query-run"
    assert attributes["error.type"] == "deadline-exceeded"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "deadline-exceeded"
    assert set(captured.children(span)) == {"dsh.start", "dsh.teardown"}
    count, dimensions = _point(captured, "dsh.delegations")
    assert count.value == 1
    assert (dimensions["dsh.stop_reason"], dimensions["error.type"]) == (ERROR, "deadline-exceeded")
    duration, dimensions = _point(captured, "gen_ai.client.operation.duration")
    assert (dimensions["dsh.stop_reason"], dimensions["error.type"]) == (ERROR, "deadline-exceeded")
    assert duration.count == 1
    assert duration.sum >= deadline  # measured from start(), before the budget's clock
    assert captured.sum_points("dsh.delegations.live")[0].value == 0
    _assert_nothing_secret(captured)


PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: added.txt\n+hi\n*** End Patch\nEOF\n"


async def test_codex_isolated_and_continued_reports_counts_never_names(
    tmp_path: Path, captured: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (home / ".gitconfig").write_text(
        "[user]\n\tname = T\n\temail = t@example.invalid\n", encoding="utf-8"
    )
    repo = tmp_path / PATH_SECRET / "repo"
    repo.mkdir(parents=True)
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"]):
        await anyio.run_process(["git", *args], cwd=repo)
    script: list[Behaviour] = [
        FunctionCall((("exec_command", {"cmd": PATCH}),)),
        PlainAnswer(f"added {ANSWER_SECRET}"),
        PlainAnswer("followed up"),
    ]
    isolation = Worktree(root=str(tmp_path / "worktrees"), branch=f"dsh/{PATH_SECRET}-{{id}}")
    with ResponsesFixture(script) as fixture:
        provider = _codex(tmp_path, fixture, continuation=True)
        first = await delegate(provider, TASK, cwd=repo, isolation=isolation)
        assert first.continuation is not None
        follow_up = await delegate(provider, "And then?", cwd=repo, resume=first.continuation)
    assert first.changes is not None
    assert first.changes.commit is not None
    assert follow_up.stop_reason == COMPLETED
    spans = sorted(captured.delegations(), key=lambda s: s.start_time or 0)
    isolated, resumed = (dict(s.attributes or {}) for s in spans)
    assert isolated["dsh.isolation.committed"] is True
    assert isolated["dsh.isolation.files_changed"] == 1
    assert isolated["dsh.isolation.insertions"] == 1
    assert isolated["dsh.isolation.commit"] == first.changes.commit
    assert isolated["dsh.continuation.offered"] is True
    assert isolated["dsh.continuation.resumed"] is False
    assert resumed["dsh.continuation.resumed"] is True
    _assert_nothing_secret(captured)
