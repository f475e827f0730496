"""One-shot background subagents through the real subagent tool (§2.7, §3.5, §7.10–7.11)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest
from dsh_subagent import (
    CancelController,
    ParentContext,
    ProductStartError,
    SubagentResult,
    SubagentService,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import BackgroundLauncher, SubagentTool, SubagentToolConfig
from dsh_subagent.tool_protocol import ToolCallContext, ToolResult
from dsh_tool_jobs import (
    BackgroundSubagentLauncher,
    JobOutcome,
    JobRegistry,
    JobsToolsConfig,
    job_tools,
    settle_run,
    settle_start,
)

pytestmark = pytest.mark.anyio

DESCRIPTION = "review the diff"


async def until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.lowlevel.checkpoint()


# -- settle_run / settle_start ---------------------------------------------------------


@dataclass
class FakeRun:
    result_value: SubagentResult | None = None
    result_error: Exception | None = None
    dispose_error: Exception | None = None
    disposals: int = 0
    id: str = "run-1"
    local_agent: object | None = None

    async def result(self) -> SubagentResult:
        if self.result_error is not None:
            raise self.result_error
        assert self.result_value is not None
        return self.result_value

    async def dispose(self) -> None:
        self.disposals += 1
        if self.dispose_error is not None:
            raise self.dispose_error


def result(stop_reason: str, text: str = "", diagnostic: str | None = None) -> SubagentResult:
    output = (TextBlock(text=text[:3]), TextBlock(text=text[3:])) if text else ()
    return SubagentResult(output=output, stop_reason=stop_reason, diagnostic=diagnostic)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda: FakeRun(result("completed", "final text")),
            JobOutcome(status="completed", output="final text"),
        ),
        (lambda: FakeRun(result("aborted", "partial")), JobOutcome(status="killed")),
        (
            lambda: FakeRun(result("error", "partial", "Claude Code denied a tool request")),
            JobOutcome(
                status="failed", detail="error; diagnostic: Claude Code denied a tool request"
            ),
        ),
        (
            lambda: FakeRun(result("max-tokens", "partial")),
            JobOutcome(status="failed", detail="max-tokens"),
        ),
        (lambda: FakeRun(result("refusal")), JobOutcome(status="failed", detail="refusal")),
        (
            lambda: FakeRun(result("something-new")),
            JobOutcome(status="failed", detail="something-new"),
        ),
        (
            lambda: FakeRun(result_error=RuntimeError("transport gone")),
            JobOutcome(status="failed", detail="RuntimeError: transport gone"),
        ),
        (
            lambda: FakeRun(result("completed", "lost"), dispose_error=RuntimeError("reap failed")),
            JobOutcome(status="failed", detail="dispose failed: RuntimeError: reap failed"),
        ),
        (
            lambda: FakeRun(
                result_error=RuntimeError("result failed"),
                dispose_error=RuntimeError("reap failed"),
            ),
            JobOutcome(
                status="failed",
                detail="RuntimeError: result failed; dispose failed: RuntimeError: reap failed",
            ),
        ),
        (
            lambda: FakeRun(result("aborted"), dispose_error=OSError("gone")),
            JobOutcome(status="failed", detail="dispose failed: OSError: gone"),
        ),
    ],
)
async def test_settle_run_maps_the_result_and_always_disposes(
    make: Callable[[], FakeRun], expected: JobOutcome
) -> None:
    run = make()  # a fresh run per backend
    assert await settle_run(run) == expected
    assert run.disposals == 1


async def test_settle_run_disposes_even_when_cancelled_while_waiting() -> None:
    gate = anyio.Event()

    @dataclass
    class Hanging(FakeRun):
        async def result(self) -> SubagentResult:
            await gate.wait()
            raise AssertionError("unreachable")

    run = Hanging()
    with anyio.move_on_after(0.01):
        await settle_run(run)
    assert run.disposals == 1


async def _raise(error: BaseException) -> FakeRun:
    raise error


@pytest.mark.parametrize(
    ("error", "aborted", "expected"),
    [
        (
            RuntimeError("setup failed"),
            False,
            JobOutcome(status="failed", detail="RuntimeError: setup failed"),
        ),
        (RuntimeError("setup failed"), True, JobOutcome(status="killed")),
        (ProductStartError("startup failed"), True, JobOutcome(status="killed")),
        (
            ProductStartError("startup failed and cleanup also failed", rollback_failed=True),
            True,
            JobOutcome(
                status="failed",
                detail="ProductStartError: startup failed and cleanup also failed",
            ),
        ),
        (
            ExceptionGroup("startup failed and cleanup also failed", [OSError("x")]),
            True,
            JobOutcome(
                status="failed",
                detail="ExceptionGroup: startup failed and cleanup also failed (1 sub-exception)",
            ),
        ),
    ],
)
async def test_settle_start_rejection_is_killed_only_when_aborted_and_rolled_back(
    error: Exception, aborted: bool, expected: JobOutcome
) -> None:
    controller = CancelController()
    if aborted:
        controller.cancel("background subagent task killed")
    assert await settle_start(_raise(error), controller.signal) == expected


async def test_settle_start_delegates_a_published_run() -> None:
    async def published() -> FakeRun:
        return run

    run = FakeRun(result("completed", "ok"))
    outcome = await settle_start(published(), CancelController().signal)
    assert outcome == JobOutcome(status="completed", output="ok")
    assert run.disposals == 1


# -- through the subagent tool ---------------------------------------------------------


@dataclass
class Harness:
    provider: ScriptedProvider
    registry: JobRegistry
    tool: SubagentTool
    tools: dict[str, object]
    notices: list[tuple[ParentContext, str]]
    parent: ParentContext

    def context(self, cancel: CancelController | None = None) -> ToolCallContext:
        return ToolCallContext(self.parent, (cancel or CancelController()).signal)

    async def delegate(self, cancel: CancelController | None = None) -> ToolResult:
        return await self.tool.call(
            {"description": DESCRIPTION, "prompt": "do it", "run_in_background": True},
            self.context(cancel),
        )

    async def call(self, name: str, **arguments: object) -> ToolResult:
        tool = self.tools[name]
        assert hasattr(tool, "call")
        reply: ToolResult = await tool.call(arguments, self.context())
        return reply


@asynccontextmanager
async def harness(*scripts: Script, max_jobs: int = 10) -> AsyncIterator[Harness]:
    provider = ScriptedProvider("scripted", scripts or (Script.answer("done"),))
    notices: list[tuple[ParentContext, str]] = []
    async with SubagentService() as service:
        service.register_provider(provider)
        config = JobsToolsConfig(max_concurrent_jobs_per_owner=max_jobs)
        async with JobRegistry(
            max_concurrent_jobs_per_owner=config.max_concurrent_jobs_per_owner,
            notice_sink=lambda owner, text: notices.append((owner, text)),
        ) as registry:
            launcher = BackgroundSubagentLauncher(registry, service)
            tool = SubagentTool(
                service,
                SubagentToolConfig(provider="scripted", max_depth="provider-managed"),
                launcher,
            )
            tools: dict[str, object] = {t.name: t for t in job_tools(registry, config)}
            yield Harness(provider, registry, tool, tools, notices, ParentContext(session_id="p"))


async def test_launcher_implements_the_subagent_protocol() -> None:
    async with SubagentService() as service, JobRegistry() as registry:
        assert isinstance(BackgroundSubagentLauncher(registry, service), BackgroundLauncher)


async def test_background_run_returns_the_id_before_startup_and_completes_with_a_notice() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("final answer"), hold_start=gate)) as h:
        started = await h.delegate()
        assert started == ToolResult("started background subagent job subagent-1")
        await h.provider.wait_started()
        assert h.provider.published_count == 0  # the id came back while startup is pending
        assert (await h.call("job_output", job_id="subagent-1")).text == (
            "(no new output)\n[status: running]"
        )
        # Before the run started: elapsed time only (no activity, no token count yet).
        listed = (await h.call("job_list")).text
        assert re.fullmatch(rf"subagent-1 \[subagent\] running — {DESCRIPTION} \(\d+s\)", listed), (
            listed
        )
        gate.set()
        await until(lambda: len(h.notices) == 1)
        assert h.notices[0][0] is h.parent
        assert h.notices[0][1] == (
            f"background job subagent-1 (subagent: {DESCRIPTION}) finished [status: completed]. "
            "Read its output with job_output."
        )
        # Settlement waited for disposal.
        assert h.provider.records[0].teardowns == 1
        for _ in range(2):
            assert (await h.call("job_output", job_id="subagent-1")).text == (
                "final answer\n[status: completed]"
            )


async def test_the_tool_call_signal_does_not_own_the_background_run() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("ok"), hold_result=gate)) as h:
        call_signal = CancelController()
        await h.delegate(call_signal)
        call_signal.cancel("tool call finished")
        await h.provider.wait_attempts()
        assert not h.provider.records[0].request.cancel.aborted
        gate.set()
        reply = await h.call("job_output", job_id="subagent-1", wait=True)
        assert reply.text == "ok\n[status: completed]"
        assert h.notices == []  # the wait reported it


async def test_failed_run_shows_reason_and_diagnostic_without_partial_output() -> None:
    script = Script(
        attempt_error=RuntimeError("product crashed"),
        error_diagnostic="Product subagent failed: process exited with code 3",
        partial=(TextBlock(text="half done"),),
    )
    async with harness(script) as h:
        await h.delegate()
        await until(lambda: len(h.notices) == 1)
        detail = "error; diagnostic: Product subagent failed: process exited with code 3"
        assert h.notices[0][1] == (
            f"background job subagent-1 (subagent: {DESCRIPTION}) finished "
            f"[status: failed, {detail}]. Read its output with job_output."
        )
        reply = await h.call("job_output", job_id="subagent-1")
        assert reply.text == f"(no new output)\n[status: failed, {detail}]"


async def test_start_failure_is_failed_with_the_error() -> None:
    async with harness(
        Script(start_error=ProductStartError("Product subagent failed: start"))
    ) as h:
        await h.delegate()
        await until(lambda: len(h.notices) == 1)
        reply = await h.call("job_output", job_id="subagent-1")
        assert reply.text == (
            "(no new output)\n[status: failed, ProductStartError: Product subagent failed: start]"
        )


async def test_job_kill_during_startup_cancels_the_provider_and_ends_killed() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_start=gate)) as h:
        await h.delegate()
        await h.provider.wait_started()
        reply = await h.call("job_kill", job_id="subagent-1")
        assert reply.text == "requested cancellation of job subagent-1"
        reply = await h.call("job_output", job_id="subagent-1", wait=True)
        assert reply.text == "(no new output)\n[status: killed]"
        record = h.provider.records[0]
        assert record.request.cancel.reason == "background subagent task killed"
        assert h.provider.published_count == 0
        assert h.notices == []


async def test_job_kill_during_execution_forwards_the_reason_and_disposes() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_result=gate)) as h:
        await h.delegate()
        await h.provider.wait_attempts()
        await h.call("job_kill", job_id="subagent-1", reason="superseded")
        reply = await h.call("job_output", job_id="subagent-1", wait=True)
        assert reply.text == "(no new output)\n[status: killed]"
        record = h.provider.records[0]
        assert record.cancel_reasons == ["superseded"]
        assert record.teardowns == 1
        assert h.notices == []


async def test_owner_disposal_while_the_run_is_starting() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_start=gate)) as h:
        await h.delegate()
        await h.provider.wait_started()
        with anyio.fail_after(5):
            await h.registry.dispose_owner(h.parent)
        assert h.provider.records[0].request.cancel.reason == "owner disposed"
        assert h.provider.published_count == 0
        assert (await h.call("job_list")).text == "(no background jobs)"
        assert h.notices == []


async def test_owner_disposal_during_execution_disposes_the_run() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_result=gate)) as h:
        await h.delegate()
        await h.provider.wait_attempts()
        await h.registry.dispose_owner(h.parent)
        assert h.provider.records[0].teardowns == 1
        assert h.notices == []


async def test_registry_exit_cancels_and_disposes_background_runs() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_result=gate)) as h:
        await h.delegate()
        await h.provider.wait_attempts()
        registry, provider = h.registry, h.provider
    assert provider.records[0].cancel_reasons == ["jobs service disposed"]
    assert provider.records[0].teardowns == 1
    assert registry.list(None) == []


async def test_preflight_failure_never_starts_the_provider() -> None:
    gate = anyio.Event()
    async with harness(dataclasses.replace(Script.answer("x"), hold_start=gate), max_jobs=1) as h:
        await h.delegate()
        refused = await h.delegate()
        assert refused.is_error
        assert refused.text == (
            "Error: background job limit reached for this owner (limit: 1); use job_kill to "
            "stop an unneeded job, wait for it to finish, then retry"
        )
        await h.provider.wait_started()
        assert h.provider.start_count == 1
        gate.set()
