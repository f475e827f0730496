"""Test harness for the Codex provider: fake app-server scripts and a delegation driver.

Imported by the test modules (``conftest`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from dsh_subagent import (
    Budget,
    CancelController,
    ConfinementSetting,
    Launch,
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
from dsh_subagent_codex import CodexConfig, CodexProvider

FAKE_SERVER = str(Path(__file__).with_name("fake_app_server.py"))
SCHEMA_DIR = Path(__file__).with_name("schema") / "codex-0.163.0"

THREAD = "thr-1"
TURN = "turn-1"
SECRET = "sk-planted-SECRET-4242 /home/planted/secret-path"
"""Planted in every raw product field a test controls; must never reach a diagnostic."""

Step = dict[str, Any]


def handshake(thread_id: str = THREAD, *, ephemeral: bool = True) -> list[Step]:
    """The fake's side of initialize → initialized → thread/start."""
    return [
        {"op": "expect", "method": "initialize"},
        {"op": "reply", "result": {"userAgent": "fake/0.163.0", "codexHome": SECRET}},
        {"op": "expect", "method": "initialized"},
        {"op": "expect", "method": "thread/start"},
        {"op": "reply", "result": {"thread": {"id": thread_id, "ephemeral": ephemeral}}},
    ]


def turn_start(turn_id: str = TURN) -> list[Step]:
    """Accept turn/start and answer with ``turn_id``."""
    return [
        {"op": "expect", "method": "turn/start"},
        {"op": "reply", "result": {"turn": {"id": turn_id, "status": "inProgress", "items": []}}},
    ]


def notify(method: str, params: Any) -> Step:
    return {"op": "send", "frame": {"method": method, "params": params, "emittedAtMs": 1}}


def agent_message(
    text: Any,
    phase: Any = None,
    *,
    turn: str = TURN,
    thread: str = THREAD,
    omit_phase: bool = False,
) -> Step:
    item: dict[str, Any] = {"type": "agentMessage", "id": "m", "text": text, "memoryCitation": None}
    if not omit_phase:
        item["phase"] = phase
    return notify("item/completed", {"threadId": thread, "turnId": turn, "item": item})


def item(item_type: str, status: str, *, turn: str = TURN) -> Step:
    payload = {"type": item_type, "id": "i", "status": status, "command": SECRET}
    return notify("item/completed", {"threadId": THREAD, "turnId": turn, "item": payload})


def terminal(
    status: str = "completed", error: Any = None, *, turn: str = TURN, thread: str = THREAD
) -> Step:
    return notify(
        "turn/completed",
        {"threadId": thread, "turn": {"id": turn, "status": status, "error": error, "items": []}},
    )


def failed(info: Any) -> Step:
    return terminal(
        "failed", {"message": SECRET, "codexErrorInfo": info, "additionalDetails": SECRET}
    )


def server_request(request_id: int, method: str, **params: Any) -> Step:
    payload = {"threadId": THREAD, "turnId": TURN, "itemId": "i", "command": SECRET, **params}
    return {"op": "send", "frame": {"id": request_id, "method": method, "params": payload}}


def answered(*steps: Step, text: str = "the answer") -> list[Step]:
    """A complete successful run: handshake, turn, ``steps``, final answer, terminal."""
    return [
        *handshake(),
        *turn_start(),
        *steps,
        agent_message(text, "final_answer"),
        terminal(),
    ]


@dataclass
class FakeCodex:
    """Builds providers that spawn the fake app-server with a given script."""

    root: Path
    workspace: Path
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    logs: list[Path] = field(default_factory=list)

    def provider(self, steps: Sequence[Step], **config: Any) -> CodexProvider:
        index = next(self._counter)
        script = self.root / f"script-{index}.json"
        log = self.root / f"fake-{index}.log"
        script.write_text(json.dumps(list(steps)))
        self.logs.append(log)
        argv = (sys.executable, "-I", FAKE_SERVER, str(script), str(log))

        class ScriptedCodexProvider(CodexProvider):
            def launch(self, cwd: str) -> Launch:
                return Launch(argv=argv)

        config.setdefault("dispose_grace", 2.0)
        # The fake's script and log live beside the workspace: the instance adds them.
        config.setdefault("confinement", ConfinementSetting(write=(str(self.root),)))
        return ScriptedCodexProvider(CodexConfig(**config))

    def records(self, index: int = -1) -> list[dict[str, Any]]:
        """Everything the fake logged: client frames and ``event`` markers."""
        log = self.logs[index]
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    def frames(self, index: int = -1) -> list[dict[str, Any]]:
        """The frames the client sent, in order."""
        return [r for r in self.records(index) if "event" not in r]

    def sent(self, method: str, index: int = -1) -> list[dict[str, Any]]:
        return [f for f in self.frames(index) if f.get("method") == method]

    def spawned(self, index: int = -1) -> bool:
        return any(r.get("event") == "started" for r in self.records(index))


async def wait_until(predicate: Callable[[], bool], deadline: float = 20.0) -> None:
    """Poll ``predicate`` (a marker written by the fake process) with a deadline."""
    with anyio.fail_after(deadline):
        while not predicate():  # noqa: ASYNC110 - the marker comes from another process
            await anyio.sleep(0.01)


def make_request(
    task_group: Any,
    cwd: str | None,
    *,
    prompt: Sequence[str] = ("do the task",),
    cancel: CancelController | None = None,
    provider: str = "codex",
) -> ResolvedSubagentStartRequest:
    return ResolvedSubagentStartRequest(
        prompt=tuple(TextBlock(text=text) for text in prompt),
        parent=ParentContext(session_id="parent-session", cwd=cwd),
        cancel=(cancel or CancelController()).signal,
        descriptor=SubagentDescriptor(provider=provider),
        task_group=task_group,
    )


async def delegate(
    provider: CodexProvider,
    cwd: Path | str | None,
    *,
    prompt: Sequence[str] = ("do the task",),
    cancel: CancelController | None = None,
) -> tuple[SubagentResult, SubagentRun]:
    """Start, collect the result, dispose; all under a test deadline."""
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            request = make_request(
                tg, None if cwd is None else str(cwd), prompt=prompt, cancel=cancel
            )
            run = await provider.start(request)
            try:
                result = await run.result()
            finally:
                await run.dispose()
    return result, run


async def delegate_with_progress(
    provider: CodexProvider,
    cwd: Path | str,
    *,
    prompt: Sequence[str] = ("do the task",),
    progress_commands: bool = False,
    budget: Budget | None = None,
    deadline: float = 30.0,
    on_result: Callable[[SubagentResult], None] | None = None,
) -> tuple[SubagentResult, list[ProgressEvent]]:
    """Delegate through a :class:`SubagentService` (the host's way in) and read the run's
    progress until it ends (at settlement). ``on_result`` runs between the result and
    the run's disposal (e.g. to check that the tree is already gone)."""
    events: list[ProgressEvent] = []
    request = SubagentStartRequest(
        prompt=tuple(TextBlock(text=text) for text in prompt),
        parent=ParentContext(session_id="parent-session", cwd=str(cwd)),
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
