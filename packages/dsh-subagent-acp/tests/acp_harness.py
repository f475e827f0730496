"""Test helpers: a scripted ACP agent per test, and one-call delegation through the provider."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from dsh_subagent import (
    Budget,
    CancelController,
    ConfinementSetting,
    ParentContext,
    ProgressEvent,
    ResolvedSubagentStartRequest,
    SubagentDescriptor,
    SubagentResult,
    SubagentRun,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_acp import AcpConfig, AcpProvider

AGENT = Path(__file__).with_name("scripted_agent.py")

FAST_EOF_GRACE = 0.5
FAST_GRACE = 0.5


@dataclass
class Scripted:
    """One scripted agent: its script, record file and workspace under ``tmp``."""

    tmp: Path
    script: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workspace = self.tmp / "workspace"
        self.workspace.mkdir(exist_ok=True)
        self.record_path = self.tmp / f"record-{id(self)}.jsonl"
        self.script.setdefault("record", str(self.record_path))

    def config(self, **overrides: Any) -> AcpConfig:
        script_path = self.tmp / f"script-{id(self)}.json"
        script_path.write_text(json.dumps(self.script), encoding="utf-8")
        values: dict[str, Any] = {
            "command": sys.executable,
            "args": (str(AGENT), str(script_path)),
            "dispose_eof_grace": FAST_EOF_GRACE,
            "dispose_grace": FAST_GRACE,
            # The agent's script and record files live beside the workspace: confined (the
            # default), the instance adds their directory, as a user adds a path.
            "confinement": ConfinementSetting(write=(str(self.tmp),)),
        }
        values.update(overrides)
        return AcpConfig(**values)

    def provider(self, **overrides: Any) -> AcpProvider:
        return AcpProvider(self.config(**overrides))

    def records(self) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        lines = self.record_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["event"] == name]

    def frames(self, direction: str, method: str | None = None) -> list[dict[str, Any]]:
        found = []
        for r in self.events("frame"):
            if r["direction"] != direction:
                continue
            if method is None or r["message"].get("method") == method:
                found.append(r["message"])
        return found

    def started(self) -> dict[str, Any]:
        (event,) = self.events("started")
        return event


def make_request(
    tg: TaskGroup,
    *,
    prompt: str | tuple[str, ...] = "the task",
    cwd: str | None,
    controller: CancelController | None = None,
    provider: str = "acp",
) -> ResolvedSubagentStartRequest:
    texts = (prompt,) if isinstance(prompt, str) else prompt
    return ResolvedSubagentStartRequest(
        prompt=tuple(TextBlock(text=t) for t in texts),
        parent=ParentContext(session_id="parent-session", cwd=cwd),
        cancel=(controller or CancelController()).signal,
        descriptor=SubagentDescriptor(provider=provider),
        task_group=tg,
    )


@asynccontextmanager
async def started_run(
    provider: AcpProvider,
    *,
    cwd: str | None,
    prompt: str | tuple[str, ...] = "the task",
    controller: CancelController | None = None,
) -> AsyncIterator[SubagentRun]:
    """Start one run in a task group of its own; always dispose it on the way out."""
    async with anyio.create_task_group() as tg:
        run = await provider.start(
            make_request(tg, prompt=prompt, cwd=cwd, controller=controller, provider=provider.name)
        )
        try:
            yield run
        finally:
            with anyio.CancelScope(shield=True):
                await run.dispose()


async def delegate(
    provider: AcpProvider, *, cwd: str | None, prompt: str | tuple[str, ...] = "the task"
) -> SubagentResult:
    """Start, settle and dispose one run; returns its result."""
    with anyio.fail_after(30):
        async with started_run(provider, cwd=cwd, prompt=prompt) as run:
            return await run.result()


async def delegate_with_progress(
    provider: AcpProvider,
    *,
    cwd: str,
    prompt: str = "the task",
    progress_commands: bool = False,
    budget: Budget | None = None,
    deadline: float = 30.0,
    on_result: Callable[[SubagentResult], None] | None = None,
) -> tuple[SubagentResult, list[ProgressEvent]]:
    """Delegate through a :class:`SubagentService` (the host's way in), reading the run's
    progress until it ends (at settlement). ``on_result`` runs between the result and
    the run's disposal (e.g. to check that the tree is already gone)."""
    events: list[ProgressEvent] = []
    request = SubagentStartRequest(
        prompt=(TextBlock(text=prompt),),
        parent=ParentContext(session_id="parent-session", cwd=cwd),
        progress_commands=progress_commands,
        budget=budget,
    )
    with anyio.fail_after(deadline):
        async with SubagentService() as service:
            service.register_provider(provider)
            run = await service.start(provider.name, request)
            try:
                async for event in run.progress:
                    events.append(event)
                result = await run.result()
                if on_result is not None:
                    on_result(result)
            finally:
                await run.dispose()
    return result, events


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def wait_until_recorded(agent: Scripted, event: str, method: str | None = None) -> None:
    """Poll the agent's record until it shows ``event`` (an incoming ``method`` frame)."""
    with anyio.fail_after(20):
        while True:
            if method is not None:
                if agent.frames("incoming", method):
                    return
            elif agent.events(event):
                return
            await anyio.sleep(0.02)
