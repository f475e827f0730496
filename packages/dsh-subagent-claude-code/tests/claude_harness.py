"""Helpers for the package tests: a provider wired to the scripted stand-in CLI, run drivers."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from dsh_subagent import (
    CancelController,
    ConfinementSetting,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubagentDescriptor,
    SubagentResult,
    SubagentRun,
    TextBlock,
)
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver

STANDIN = Path(__file__).with_name("claude_standin_cli.py")

GRACE = 2.0
"""The stand-in provider's dispose grace, also its stdout drain grace after the CLI exit."""

Spawner = Callable[..., Awaitable[ManagedProcess]]
"""``dsh_subprocess.spawn`` or a test double with its signature."""


class SeamProvider(ClaudeCodeProvider):
    """The provider with the runtime's ``spawn`` seam routed to a test spawner."""

    def __init__(self, config: ClaudeCodeConfig, *, spawner: Spawner | None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self._spawner = spawner

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        if self._spawner is None:
            return await super().spawn(spec, stderr_observer)
        return await self._spawner(spec, stderr_observer=stderr_observer)


def standin_prefix() -> Sequence[str]:
    return (sys.executable, str(STANDIN))


@dataclass
class Standin:
    """A stand-in scenario plus where it records what it saw."""

    root: Path
    workspace: Path
    record: Path

    def provider(
        self,
        steps: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Mapping[str, Any]]],
        *,
        env: Mapping[str, str | None] | None = None,
        **config: Any,
    ) -> ClaudeCodeProvider:
        overlay: dict[str, str | None] = {
            "STANDIN_SCENARIO": json.dumps(steps if isinstance(steps, Mapping) else list(steps)),
            "STANDIN_RECORD": str(self.record),
        }
        overlay.update(env or {})
        spawner = config.pop("spawner", None)
        # The stand-in records into a directory beside the workspace, and tests plant
        # files in the root: the instance adds the root, as a user adds a path.
        config.setdefault("confinement", ConfinementSetting(write=(str(self.root),)))
        return SeamProvider(
            ClaudeCodeConfig(
                env=overlay, dispose_grace=config.pop("dispose_grace", GRACE), **config
            ),
            cli_prefix=standin_prefix,
            spawner=spawner,
        )

    def recorded(self, name: str) -> Any:
        return json.loads((self.record / name).read_text(encoding="utf-8"))

    def path(self, name: str) -> Path:
        return self.root / name


def new_standin(tmp_path: Path) -> Standin:
    workspace = tmp_path / "workspace"
    record = tmp_path / "record"
    workspace.mkdir()
    record.mkdir()
    return Standin(root=tmp_path, workspace=workspace, record=record)


def make_request(
    tg: TaskGroup,
    cwd: Path | str | None,
    prompt: Sequence[str] = ("the task",),
    cancel: CancelController | None = None,
    provider: str = "claude-code",
) -> ResolvedSubagentStartRequest:
    return ResolvedSubagentStartRequest(
        prompt=tuple(TextBlock(text=text) for text in prompt),
        parent=ParentContext(session_id="parent", cwd=None if cwd is None else str(cwd)),
        cancel=(cancel or CancelController()).signal,
        descriptor=SubagentDescriptor(provider=provider),
        task_group=tg,
    )


@asynccontextmanager
async def started(
    provider: ClaudeCodeProvider,
    cwd: Path | str | None,
    prompt: Sequence[str] = ("the task",),
    cancel: CancelController | None = None,
) -> AsyncIterator[SubagentRun]:
    """Start one run in its own task group; dispose it on exit."""
    async with anyio.create_task_group() as tg:
        run = await provider.start(make_request(tg, cwd, prompt, cancel))
        try:
            yield run
        finally:
            with anyio.CancelScope(shield=True):
                await run.dispose()


async def run_once(
    provider: ClaudeCodeProvider, cwd: Path | str | None, prompt: Sequence[str] = ("the task",)
) -> SubagentResult:
    async with started(provider, cwd, prompt) as run:
        with anyio.fail_after(30):
            return await run.result()


async def wait_for(condition: Callable[[], bool], within: float = 15.0) -> None:
    """Poll an outside fact (a file, a process) with a deadline; no event exists for it."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.01)
