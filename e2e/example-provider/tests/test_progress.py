"""The example provider maps its child's progress messages to progress events."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_subagent import (
    COMPLETED,
    AssistantText,
    ParentContext,
    ProgressEvent,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolStarted,
    Usage,
    UsageUpdated,
)

pytestmark = pytest.mark.anyio

TASK = "dsh-example/progress\ndsh-contract/1 complete T-5eed1234"


async def _run(
    cwd: Path, *, commands: bool, env: dict[str, str] | None = None
) -> tuple[list[ProgressEvent], Usage | None, str]:
    request = SubagentStartRequest(
        prompt=(TextBlock(text=TASK),),
        parent=ParentContext(session_id="s", cwd=str(cwd)),
        progress_commands=commands,
    )
    async with SubagentService() as service:
        service.register_provider(ExampleProvider(ExampleConfig(env=env or {})))
        run = await service.start("example", request)
        events: list[ProgressEvent] = []
        async with anyio.create_task_group() as group:

            async def read() -> None:
                async for event in run.progress:
                    events.append(event)

            group.start_soon(read)
            result = await run.result()
        await run.dispose()
    assert result.stop_reason == COMPLETED
    return events, result.usage, result.text


async def test_progress_is_what_the_child_said_in_order(tmp_path: Path) -> None:
    events, usage, text = await _run(tmp_path, commands=False)
    usage_reported = Usage(input_tokens=1200, output_tokens=34)
    assert events == [
        AssistantText(text="Looking at the workspace.", delta=True),
        ToolStarted(tool_kind="command", name="Bash"),
        UsageUpdated(usage=usage_reported),
    ]
    # The runtime copies the last reported usage into the result; nothing is estimated.
    assert usage == usage_reported
    assert text == "T-5eed1234"


async def test_command_text_only_when_the_host_opted_in(tmp_path: Path) -> None:
    events, _, _ = await _run(tmp_path, commands=True)
    tools = [event for event in events if isinstance(event, ToolStarted)]
    assert tools == [ToolStarted(tool_kind="command", name="Bash", command="ls -la")]


async def test_a_planted_env_value_never_reaches_progress(tmp_path: Path) -> None:
    secret = "sk-PLANTED-ENV-9c4e17"
    env = {"OPENAI_API_KEY": secret, "DSH_EXAMPLE_TOKEN": secret}
    events, _, _ = await _run(tmp_path, commands=True, env=env)
    assert len(events) == 3
    for event in events:
        assert secret not in event.model_dump_json()
