"""Secret non-leak properties of progress (hypothesis; ``DSH_HYPOTHESIS_PROFILE=nightly``).

Progress carries product text, but never an environment value or a layered credential.
A random secret is planted in the provider's env overlay (delivered to the product, which
echoes it in its tool results and tool command) and as a credential in the host
environment (scrubbed before the product starts); neither may appear in any progress
event, even with command text switched on.

Claude Code: the scripted stand-in CLI behind the real SDK.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_subagent import (
    ConfinementSetting,
    ParentContext,
    ProgressEvent,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    ToolStarted,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from hypothesis import given

from reliability.fakes import CLAUDE_STANDIN
from reliability.planted import ENV_NAME
from reliability.test_rel_secrets import SECRETS

pytestmark = pytest.mark.reliability

HOST_CREDENTIAL = "ANTHROPIC_API_KEY"


@contextmanager
def _host_env(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def _frame(kind: str, content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "message": {"role": kind, "model": "standin", "content": content},
        "parent_tool_use_id": None,
        "session_id": "standin-session",
        **extra,
    }


def _echoing_product(workspace: Path) -> list[dict[str, Any]]:
    """A run whose tools echo the env overlay's value back in every result field."""
    command = f"echo ${ENV_NAME} > {workspace / 'out.txt'}"
    return [
        {"op": "init"},
        {
            "op": "emit",
            "message": _frame(
                "assistant",
                [
                    {"type": "text", "text": "working"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}},
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Write",
                        "input": {"file_path": str(workspace / "f.txt"), "content": "@ENV@"},
                    },
                ],
            ),
        },
        {
            "op": "emit_env",
            "var": ENV_NAME,
            "message": _frame(
                "user",
                [{"type": "tool_result", "tool_use_id": "t1", "content": "@ENV@"}],
                tool_use_result={"stdout": "@ENV@", "stderr": "@ENV@"},
            ),
        },
        {
            "op": "emit_env",
            "var": ENV_NAME,
            "message": _frame(
                "user",
                [{"type": "tool_result", "tool_use_id": "t2", "content": "wrote @ENV@"}],
                tool_use_result={"filePath": "@ENV@", "content": "@ENV@"},
            ),
        },
        {"op": "result", "result": "done", "usage": {"input_tokens": 1, "output_tokens": 1}},
    ]


async def _claude_progress(secret: str, root: Path) -> list[ProgressEvent]:
    workspace = root / "ws"
    workspace.mkdir()
    record = root / "record"
    record.mkdir()
    env = {
        ENV_NAME: secret,
        "STANDIN_SCENARIO": json.dumps(_echoing_product(workspace)),
        "STANDIN_RECORD": str(record),
    }
    provider = ClaudeCodeProvider(
        # The stand-in is a script of this checkout that writes its record beside the
        # workspace: the instance grants both, as a user grants a product's extra paths.
        ClaudeCodeConfig(
            env=env,
            dispose_grace=0.5,
            confinement=ConfinementSetting(
                read=(str(Path(CLAUDE_STANDIN).parent),), write=(str(record),)
            ),
        ),
        cli_prefix=lambda: (sys.executable, CLAUDE_STANDIN),
    )
    request = SubagentStartRequest(
        prompt=(TextBlock(text="task"),),
        parent=ParentContext(session_id="p", cwd=str(workspace)),
        progress_commands=True,
    )
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start("claude-code", request)
        with anyio.fail_after(30):
            events = [event async for event in run.progress]
            result = await run.result()
        await run.dispose()
    assert result.stop_reason == "completed", result.diagnostic
    return events


@given(secret=SECRETS)
def test_env_values_and_host_credentials_never_reach_claude_code_progress(secret: str) -> None:
    async def main() -> list[ProgressEvent]:
        with tempfile.TemporaryDirectory() as root:
            return await _claude_progress(secret, Path(root))

    with _host_env(HOST_CREDENTIAL, "host-" + secret):
        events = anyio.run(main)
    texts = [text for event in events for text in _strings(event.model_dump())]
    assert len(events) >= 6, events  # turn, text, two tools started and finished, ...
    assert not [text for text in texts if secret in text]
    # The command is reported (the host opted in) with the variable's name, not its value.
    [command] = [e.command for e in events if isinstance(e, ToolStarted) and e.command]
    assert f"${ENV_NAME}" in command


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a dumped event (keys too), unescaped."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
