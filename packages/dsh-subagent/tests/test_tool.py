"""The model-facing subagent tool (reference-core §3, checklist §6.3)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import anyio
import pydantic
import pytest
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_TOKENS,
    REFUSAL,
    AgentOptions,
    CancelController,
    ParentContext,
    ProductTeardownError,
    PublishedRun,
    SubagentCapabilities,
    SubagentError,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import (
    BackgroundLauncher,
    ModelTool,
    SubagentTool,
    SubagentToolConfig,
    ToolCallContext,
    ToolResult,
    mount_subagent_tool,
    run_tool_call,
    stop_headline,
)

pytestmark = pytest.mark.anyio

PARENT = ParentContext(session_id="parent-1", cwd="/work")
DEPTH = SubagentCapabilities(depth_limit=True)


def context(cancel: CancelController | None = None) -> ToolCallContext:
    return ToolCallContext(parent=PARENT, cancel=(cancel or CancelController()).signal)


def args(prompt: str = "do it", **extra: object) -> dict[str, object]:
    return {"description": "Do the thing", "prompt": prompt, **extra}


def managed(**fields: object) -> SubagentToolConfig:
    return SubagentToolConfig.model_validate(
        {"provider": "p", "max_depth": "provider-managed", **fields}
    )


def prompt_description(tool: SubagentTool) -> str:
    properties = tool.parameters["properties"]
    assert isinstance(properties, dict)
    prompt = properties["prompt"]
    assert isinstance(prompt, dict)
    text = prompt["description"]
    assert isinstance(text, str)
    return text


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as running:
        yield running


async def test_foreground_returns_the_child_text(service: SubagentService) -> None:
    provider = ScriptedProvider(
        "p", [Script(output=(TextBlock(text="ans"), TextBlock(text="wer")), stop_reason=COMPLETED)]
    )
    service.register_provider(provider)
    tool = SubagentTool(service, managed())
    assert isinstance(tool, ModelTool)
    assert tool.name == "subagent"
    result = await tool.call(args(), context())
    assert result == ToolResult("answer")
    record = provider.records[0]
    assert record.request.label == "Do the thing"
    assert record.request.prompt == (TextBlock(text="do it"),)
    assert record.request.parent is PARENT
    assert (record.teardowns, record.cancel_requests) == (1, 1)  # disposed exactly once


async def test_schema_with_background(service: SubagentService) -> None:
    service.register_provider(ScriptedProvider("p"))
    tool = SubagentTool(service, managed())
    params = tool.parameters
    assert params["type"] == "object"
    assert isinstance(params["properties"], dict)
    assert set(params["properties"]) == {"description", "prompt", "run_in_background"}
    assert params["required"] == ["description", "prompt"]
    assert params["properties"]["run_in_background"] == {
        "type": "boolean",
        "description": "Whether to run as a background job and return its id. Defaults to "
        "false; collect with job_output or stop with job_kill.",
    }
    assert "job_output" in tool.description
    assert tool.description.endswith(
        " This call waits for the result by default. Set `run_in_background: true` to return "
        "a job id; collect with `job_output` and stop with `job_kill`."
    )


async def test_background_disabled(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    tool = SubagentTool(service, managed(enable_run_in_background=False))
    properties = tool.parameters["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == {"description", "prompt"}
    assert "job_output" not in tool.description
    assert tool.description.endswith(" This call waits for the subagent and returns its result.")
    result = await tool.call(args(run_in_background=True), context())
    assert result == ToolResult(
        "Error: run_in_background is disabled for this tool instance "
        "(enable_run_in_background: false)",
        is_error=True,
    )
    assert provider.start_count == 0


async def test_every_call_is_concurrency_safe(service: SubagentService) -> None:
    tool = SubagentTool(service, managed())
    assert tool.is_concurrency_safe(args())
    assert tool.is_concurrency_safe(args(run_in_background=True))


async def test_two_foreground_delegations_really_overlap(service: SubagentService) -> None:
    gate = anyio.Event()
    provider = ScriptedProvider("p", [replace(Script.answer("x"), hold_result=gate)])
    service.register_provider(provider)
    tool = SubagentTool(service, managed())
    results: list[ToolResult] = []

    async def delegate() -> None:
        results.append(await tool.call(args(), context()))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(delegate)
            group.start_soon(delegate)
            await provider.wait_attempts(2)  # would never happen if calls were serialised
            gate.set()
    assert results == [ToolResult("x"), ToolResult("x")]


@pytest.mark.parametrize(
    ("reason", "headline"),
    [
        (ABORTED, "subagent run was cancelled"),
        (ERROR, "subagent run failed"),
        (MAX_TOKENS, "subagent run hit its token limit before finishing"),
        (REFUSAL, "subagent declined the task"),
        ("paused", "subagent run ended abnormally (paused)"),
    ],
)
async def test_non_completed_reasons(service: SubagentService, reason: str, headline: str) -> None:
    provider = ScriptedProvider(
        "p", [Script(output=(TextBlock(text="partial reply"),), stop_reason=reason)]
    )
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(args(), context())
    assert result.is_error
    assert result.text == (
        f"Error: {headline}\nPartial output before the run ended:\npartial reply"
    )
    assert provider.records[0].teardowns == 1


async def test_exact_error_text_with_diagnostic(service: SubagentService) -> None:
    service.register_provider(
        ScriptedProvider(
            "p",
            [
                Script(
                    attempt_error=RuntimeError("raw product text must not show"),
                    error_diagnostic="Claude Code denied a tool request",
                    partial=(TextBlock(text="partial "), TextBlock(text="assistant text")),
                )
            ],
        )
    )
    result = await SubagentTool(service, managed()).call(args(), context())
    assert result == ToolResult(
        "Error: subagent run failed\nDiagnostic: Claude Code denied a tool request\n"
        "Partial output before the run ended:\npartial assistant text",
        is_error=True,
    )


async def test_failure_without_partial_or_diagnostic_is_the_headline(
    service: SubagentService,
) -> None:
    service.register_provider(ScriptedProvider("p", [Script(stop_reason=ERROR)]))
    result = await SubagentTool(service, managed()).call(args(), context())
    assert result == ToolResult("Error: subagent run failed", is_error=True)


async def test_two_tools_side_by_side(service: SubagentService) -> None:
    service.register_provider(ScriptedProvider("codex", [Script.answer("from codex")]))
    service.register_provider(ScriptedProvider("claude", [Script.answer("from claude")]))
    codex = SubagentTool(service, managed(tool_name="codex_agent", provider="codex"))
    claude = SubagentTool(service, managed(tool_name="claude_agent", provider="claude"))
    assert (codex.name, claude.name) == ("codex_agent", "claude_agent")
    assert (await codex.call(args(), context())).text == "from codex"
    assert (await claude.call(args(), context())).text == "from claude"


async def test_configured_fields_are_forwarded(service: SubagentService) -> None:
    everything = SubagentCapabilities(
        agent_options=True, depth_limit=True, tool_filter=True, persona=True
    )
    provider = ScriptedProvider("p", capabilities=everything)
    service.register_provider(provider)
    config = SubagentToolConfig(
        provider="p",
        max_depth=2,
        persona="reviewer",
        tool_filter=ToolFilter(deny=("bash",)),
        agent_options=AgentOptions(model="m"),
    )
    assert (await SubagentTool(service, config).call(args(), context())).text == "done"
    request = provider.records[0].request
    assert request.max_depth == 2
    assert request.persona == "reviewer"
    assert request.tool_filter == ToolFilter(deny=("bash",))
    assert request.tool_filter.allow is None  # a partial filter gains no empty allow list
    assert request.agent_options == AgentOptions(model="m")
    assert request.output_schema is None


async def test_omitted_fields_are_not_sent(service: SubagentService) -> None:
    provider = ScriptedProvider("p")  # no capabilities: any sent field would be refused
    service.register_provider(provider)
    assert (await SubagentTool(service, managed()).call(args(), context())).text == "done"
    request = provider.records[0].request
    assert (
        request.max_depth,
        request.persona,
        request.tool_filter,
        request.agent_options,
        request.output_schema,
    ) == (None, None, None, None, None)


async def test_no_calling_agent(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(
        args(), ToolCallContext(parent=None, cancel=CancelController().signal)
    )
    assert result.is_error
    assert "requires a calling agent" in result.text
    assert provider.start_count == 0


async def test_wording_follows_inherits_parent_context(service: SubagentService) -> None:
    service.register_provider(ScriptedProvider("fresh"))
    service.register_provider(ScriptedProvider("fork", inherits_parent_context=True))
    fresh = SubagentTool(service, managed(provider="fresh"))
    fork = SubagentTool(service, managed(provider="fork"))
    assert fresh.description.startswith("Delegate a self-contained task to a subagent")
    assert fork.description.startswith("Delegate a task to a subagent that inherits")
    assert "does not share this conversation" in prompt_description(fresh)
    assert "already sees this conversation" in prompt_description(fork)


async def test_dispose_failure_after_completed_result_is_an_error(
    service: SubagentService,
) -> None:
    teardown = ProductTeardownError("Product subagent failure (product: Codex; stage: teardown)")
    provider = ScriptedProvider("p", [replace(Script.answer("fine"), dispose_error=teardown)])
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(args(), context())
    assert result == ToolResult(
        "Error: dispose failed: Product subagent failure (product: Codex; stage: teardown)",
        is_error=True,
    )
    assert provider.records[0].teardowns == 1


async def test_result_and_dispose_failures_are_both_reported(service: SubagentService) -> None:
    provider = ScriptedProvider(
        "p",
        [
            Script(
                stop_reason=ERROR,
                diagnostic="d",
                output=(TextBlock(text="partial"),),
                dispose_error=OSError("reap failed"),
            )
        ],
    )
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(args(), context())
    # Deliberate: the dispose line sits before the partial output, which always stays last.
    assert result == ToolResult(
        "Error: subagent run failed\nDiagnostic: d\ndispose failed: OSError: reap failed\n"
        "Partial output before the run ended:\npartial",
        is_error=True,
    )


async def test_raising_result_and_dispose_are_both_reported(service: SubagentService) -> None:
    provider = ScriptedProvider(
        "p",
        [
            replace(
                Script.answer("x"),
                result_error=RuntimeError("transport gone"),
                dispose_error=OSError("reap failed"),
            )
        ],
    )
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(args(), context())
    assert result == ToolResult(
        "Error: subagent run failed: RuntimeError: transport gone\n"
        "dispose failed: OSError: reap failed",
        is_error=True,
    )


async def test_tool_call_cancel_is_the_provider_channel(service: SubagentService) -> None:
    provider = ScriptedProvider(
        "p",
        [
            replace(
                Script.answer("x"), hold_result=anyio.Event(), partial=(TextBlock(text="so far"),)
            )
        ],
    )
    service.register_provider(provider)
    cancel = CancelController()
    results: list[ToolResult] = []

    async def delegate() -> None:
        results.append(await SubagentTool(service, managed()).call(args(), context(cancel)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(delegate)
            await provider.wait_attempts()
            cancel.cancel("user pressed stop")
    assert provider.records[0].cancel_reasons == ["user pressed stop"]
    assert results == [
        ToolResult(
            "Error: subagent run was cancelled\nPartial output before the run ended:\nso far",
            is_error=True,
        )
    ]
    assert provider.records[0].teardowns == 1


async def test_cancelled_tool_task_still_disposes_the_run(service: SubagentService) -> None:
    provider = ScriptedProvider("p", [replace(Script.answer("x"), hold_result=anyio.Event())])
    service.register_provider(provider)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(SubagentTool(service, managed()).call, args(), context())
            await provider.wait_attempts()
            group.cancel_scope.cancel()
    assert provider.records[0].teardowns == 1


async def test_pre_aborted_call_never_reaches_the_provider(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    cancel = CancelController()
    cancel.cancel()
    tool = SubagentTool(service, managed())
    expected = ToolResult("Error: tool call aborted before dispatch", is_error=True)
    assert await tool.call(args(), context(cancel)) == expected
    assert await tool.call(args(run_in_background=True), context(cancel)) == expected
    assert await run_tool_call(tool, args(), context(cancel)) == expected
    assert provider.start_count == 0


@pytest.mark.parametrize(
    "value", ["3", math.nan, math.inf, -math.inf, -1, 1.5, -0.0, 2**53, True, None]
)
def test_invalid_max_depth_fails_at_load(value: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        SubagentToolConfig.model_validate({"provider": "p", "max_depth": value})


def test_out_of_range_depth_names_the_rule() -> None:
    with pytest.raises(pydantic.ValidationError, match="non-negative safe integer"):
        SubagentToolConfig(provider="p", max_depth=-1)


def test_empty_tool_filter_fails_at_load() -> None:
    with pytest.raises(pydantic.ValidationError, match="names neither `allow` nor `deny`"):
        SubagentToolConfig(provider="p", tool_filter=ToolFilter())


@pytest.mark.parametrize("field", ["tool_name", "provider"])
def test_empty_names_fail_at_load(field: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        SubagentToolConfig.model_validate({"provider": "p", field: " "})


def test_unknown_config_keys_fail_at_load() -> None:
    with pytest.raises(pydantic.ValidationError):
        SubagentToolConfig.model_validate({"provider": "p", "maxDepth": 3})


async def test_default_depth_is_three_and_forwarded(service: SubagentService) -> None:
    provider = ScriptedProvider("p", capabilities=DEPTH)
    service.register_provider(provider)
    config = SubagentToolConfig(provider="p")
    assert config.max_depth == 3
    assert (await SubagentTool(service, config).call(args(), context())).text == "done"
    assert provider.records[0].request.max_depth == 3
    assert provider.records[0].request.tool_filter is None  # depth is not encoded as a filter


async def test_numeric_depth_on_incapable_provider_is_refused_at_mount(
    service: SubagentService,
) -> None:
    service.register_provider(ScriptedProvider("p"))
    with pytest.raises(SubagentError, match="provider-managed") as caught:
        SubagentTool(service, SubagentToolConfig(provider="p", max_depth=0))
    assert caught.value.message == (
        'tool-subagent: provider "p" cannot enforce max_depth (no depth_limit capability) — '
        "set max_depth: 'provider-managed' to leave the recursion budget to the provider"
    )


async def test_numeric_depth_checked_again_when_the_provider_arrives_later(
    service: SubagentService,
) -> None:
    tool = SubagentTool(service, SubagentToolConfig(provider="late", max_depth=1))
    provider = ScriptedProvider("late")
    service.register_provider(provider)
    result = await tool.call(args(), context())
    assert result.is_error
    assert "provider-managed" in result.text
    assert provider.start_count == 0


async def test_provider_managed_on_a_capability_free_provider_starts(
    service: SubagentService,
) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    assert (await SubagentTool(service, managed()).call(args(), context())).text == "done"
    assert provider.records[0].request.max_depth is None


async def test_start_failure_is_the_tool_error_without_dispose(service: SubagentService) -> None:
    provider = ScriptedProvider("q", [Script(start_error=OSError("spawn"))])
    service.register_provider(provider)
    result = await SubagentTool(service, managed(provider="q")).call(args(), context())
    assert result == ToolResult("Error: OSError: spawn", is_error=True)
    missing = await SubagentTool(service, managed(provider="absent")).call(args(), context())
    assert missing == ToolResult(
        'Error: no subagent provider registered for "absent"', is_error=True
    )
    assert provider.records[0].handle is None  # nothing was published, nothing to dispose


@pytest.mark.parametrize(
    "bad",
    [{"prompt": "x"}, {"description": "d"}, {"description": "d", "prompt": 3}],
)
async def test_malformed_arguments(service: SubagentService, bad: dict[str, object]) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(bad, context())
    assert result.is_error
    assert "must be a string" in result.text
    assert provider.start_count == 0


# -- background -----------------------------------------------------------------------------


@dataclass
class Launch:
    provider: str
    request: SubagentStartRequest
    label: str
    parent: ParentContext


class FakeLauncher:
    """Stands in for the Jobs runtime: preflight + registration, then a detached start."""

    def __init__(self, service: SubagentService, *, refuse: str | None = None) -> None:
        self.service = service
        self.refuse = refuse
        self.launches: list[Launch] = []
        self.cancel = CancelController()
        self.outputs: list[str] = []

    def launch(
        self, *, provider: str, request: SubagentStartRequest, label: str, parent: ParentContext
    ) -> str:
        if self.refuse is not None:
            raise RuntimeError(self.refuse)
        self.launches.append(Launch(provider, request, label, parent))
        return f"subagent-{len(self.launches)}"

    async def drive(self) -> None:
        launch = self.launches[-1]
        owned = launch.request.model_copy(update={"cancel": self.cancel.signal})
        run = await self.service.start(launch.provider, owned)
        self.outputs.append((await run.result()).text)
        await run.dispose()


async def test_background_returns_the_job_id_without_starting(service: SubagentService) -> None:
    provider = ScriptedProvider("p", [Script.answer("bg answer")])
    service.register_provider(provider)
    launcher = FakeLauncher(service)
    owner_cancel = CancelController()
    tool = SubagentTool(service, managed(), background=launcher)
    assert isinstance(launcher, BackgroundLauncher)
    result = await tool.call(args(run_in_background=True), context(owner_cancel))
    assert result == ToolResult("started background subagent job subagent-1")
    assert provider.start_count == 0  # the launcher owns startup
    launch = launcher.launches[0]
    assert (launch.provider, launch.label, launch.parent) == ("p", "Do the thing", PARENT)
    assert launch.request.prompt == (TextBlock(text="do it"),)
    assert launch.request.label == "Do the thing"
    assert launch.request.parent is PARENT
    # The tool call's signal is not handed over: the Job owns cancellation from here.
    assert launch.request.cancel is not owner_cancel.signal
    assert not launch.request.cancel.aborted
    with anyio.fail_after(5):
        await launcher.drive()
    assert launcher.outputs == ["bg answer"]
    owner_cancel.cancel()
    assert provider.records[0].cancel_reasons == []


async def test_background_forwards_configured_fields(service: SubagentService) -> None:
    service.register_provider(
        ScriptedProvider("p", capabilities=SubagentCapabilities(persona=True))
    )
    launcher = FakeLauncher(service)
    tool = SubagentTool(service, managed(persona="critic"), background=launcher)
    await tool.call(args(run_in_background=True), context())
    request = launcher.launches[0].request
    assert (request.persona, request.max_depth, request.tool_filter) == ("critic", None, None)


async def test_background_without_jobs_runtime(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call(args(run_in_background=True), context())
    assert result == ToolResult(
        "Error: background jobs unavailable: load dsh-tool-jobs", is_error=True
    )
    assert provider.start_count == 0


async def test_background_preflight_failure_never_starts(service: SubagentService) -> None:
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    launcher = FakeLauncher(service, refuse="no job controller serves this agent")
    tool = SubagentTool(service, managed(), background=launcher)
    result = await tool.call(args(run_in_background=True), context())
    assert result == ToolResult(
        "Error: RuntimeError: no job controller serves this agent", is_error=True
    )
    assert provider.start_count == 0


async def test_run_in_background_false_or_null_is_foreground(service: SubagentService) -> None:
    service.register_provider(ScriptedProvider("p"))
    launcher = FakeLauncher(service)
    tool = SubagentTool(service, managed(), background=launcher)
    assert (await tool.call(args(run_in_background=False), context())).text == "done"
    assert (await tool.call(args(run_in_background=None), context())).text == "done"
    bad = await tool.call(args(run_in_background="yes"), context())
    assert bad.is_error
    assert launcher.launches == []


async def test_run_tool_call_renders_escaping_exceptions() -> None:
    class Exploding:
        name = "boom"
        description = "d"

        @property
        def parameters(self) -> dict[str, pydantic.JsonValue]:
            return {"type": "object"}

        async def call(self, arguments: object, context: ToolCallContext) -> ToolResult:
            raise ValueError("kaput")

    result = await run_tool_call(Exploding(), {}, context())
    assert result == ToolResult("Error: ValueError: kaput", is_error=True)


# -- mounting ------------------------------------------------------------------------------


class Registry:
    def __init__(self) -> None:
        self.tools: dict[str, SubagentTool] = {}
        self.log: list[str] = []

    def mount(self, tool: SubagentTool) -> None:
        assert tool.name not in self.tools
        self.tools[tool.name] = tool
        self.log.append(f"+{tool.name}")

    def unmount(self, tool: SubagentTool) -> None:
        del self.tools[tool.name]
        self.log.append(f"-{tool.name}")


async def test_tool_follows_its_provider(service: SubagentService) -> None:
    registry = Registry()
    dispose = mount_subagent_tool(
        service, managed(provider="late"), on_mount=registry.mount, on_unmount=registry.unmount
    )
    assert registry.tools == {}
    service.register_provider(ScriptedProvider("other"))  # ignored
    assert registry.log == []
    remove = service.register_provider(ScriptedProvider("late"))
    assert registry.log == ["+subagent"]
    assert registry.tools["subagent"].description.startswith("Delegate a self-contained")
    assert (await registry.tools["subagent"].call(args(), context())).text == "done"
    remove()
    assert registry.tools == {}
    service.register_provider(ScriptedProvider("late", inherits_parent_context=True))
    assert registry.tools["subagent"].description.startswith("Delegate a task to a subagent that")
    dispose()
    assert registry.log == ["+subagent", "-subagent", "+subagent", "-subagent"]


async def test_disposed_mount_never_mounts(service: SubagentService) -> None:
    registry = Registry()
    dispose = mount_subagent_tool(
        service, managed(provider="p"), on_mount=registry.mount, on_unmount=registry.unmount
    )
    dispose()
    service.register_provider(ScriptedProvider("p"))
    assert registry.log == []


async def test_numeric_depth_refuses_the_late_provider_registration(
    service: SubagentService,
) -> None:
    registry = Registry()
    mount_subagent_tool(
        service,
        SubagentToolConfig(provider="p", max_depth=3),
        on_mount=registry.mount,
        on_unmount=registry.unmount,
    )
    with pytest.raises(SubagentError, match="provider-managed"):
        service.register_provider(ScriptedProvider("p"))
    assert service.list() == ()
    assert registry.tools == {}


async def test_on_run_hands_the_harness_the_foreground_run_before_it_settles(
    service: SubagentService,
) -> None:
    gate = anyio.Event()
    held = replace(Script.answer("x"), hold_result=gate)
    service.register_provider(ScriptedProvider("p", [held]))
    seen: list[PublishedRun] = []

    def on_run(run: PublishedRun) -> None:
        seen.append(run)
        assert not run.progress.closed  # live: the call has not waited for the result yet
        gate.set()

    call = ToolCallContext(parent=PARENT, cancel=CancelController().signal, on_run=on_run)
    assert await SubagentTool(service, managed()).call(args(), call) == ToolResult("x")
    (run,) = seen
    assert (await run.result()).text == "x"  # the settled result stays readable


async def test_on_run_is_not_called_for_a_background_start(service: SubagentService) -> None:
    service.register_provider(ScriptedProvider("p"))

    class Launcher:
        def launch(self, **_: object) -> str:
            return "subagent-1"

    seen: list[PublishedRun] = []
    call = ToolCallContext(parent=PARENT, cancel=CancelController().signal, on_run=seen.append)
    result = await SubagentTool(service, managed(), Launcher()).call(
        args(run_in_background=True), call
    )
    assert result == ToolResult("started background subagent job subagent-1")
    assert seen == []


async def test_a_raising_on_run_still_returns_the_answer_and_disposes(
    service: SubagentService, caplog: pytest.LogCaptureFixture
) -> None:
    provider = ScriptedProvider("p", [Script.answer("x")])
    service.register_provider(provider)

    def on_run(run: PublishedRun) -> None:
        raise RuntimeError("harness bug")

    call = ToolCallContext(parent=PARENT, cancel=CancelController().signal, on_run=on_run)
    assert await SubagentTool(service, managed()).call(args(), call) == ToolResult("x")
    assert provider.records[0].teardowns == 1
    assert "on_run hook raised" in caplog.text


@pytest.mark.parametrize(
    ("extra", "shown"),
    [({"colour": "red"}, "colour"), ({"run_in_backgroud": True}, "run_in_backgroud")],
)
async def test_an_argument_the_schema_does_not_declare_is_refused_and_starts_nothing(
    service: SubagentService, extra: dict[str, object], shown: str
) -> None:
    """The schema says ``additionalProperties: false``; the job tools refuse the same way."""
    provider = ScriptedProvider("p")
    service.register_provider(provider)
    result = await SubagentTool(service, managed()).call({**args(), **extra}, context())
    assert result == ToolResult(f"Error: unexpected argument {shown}", is_error=True)
    assert provider.records == []


async def test_an_unexpected_argument_name_is_bounded_in_the_error(
    service: SubagentService,
) -> None:
    service.register_provider(ScriptedProvider("p"))
    result = await SubagentTool(service, managed()).call({**args(), "w" * 300: 1}, context())
    assert result.text == "Error: unexpected argument " + "w" * 63 + "…"


def test_stop_headline_is_the_one_headline_per_stop_reason() -> None:
    assert stop_headline("aborted") == "subagent run was cancelled"
    assert stop_headline("refusal") == "subagent declined the task"
    assert stop_headline("weird") == "subagent run ended abnormally (weird)"
