"""The Echo test provider: a third-party-style provider on the runtime, and its helpers.

Imported by the runtime tests (``conftest`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import ClassVar

import anyio
from dsh_subagent import (
    AssistantText,
    CancelController,
    Launch,
    ParentContext,
    ProductChild,
    ProductConfig,
    ProductProvider,
    SubagentStartRequest,
    TextBlock,
    Usage,
    UsageUpdated,
)
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver

CHILD = str(Path(__file__).with_name("runtime_child.py"))
"""The scripted child program (see its docstring)."""


class EchoConfig(ProductConfig):
    provider_name: str = "echo"
    child_mode: str = ""
    argv0: str = sys.executable


class EchoProvider(ProductProvider[EchoConfig]):
    Config: ClassVar[type[EchoConfig]] = EchoConfig
    product: ClassVar[str] = "Echo"
    max_line_bytes: ClassVar[int] = 64 * 1024

    def __init__(self, config: EchoConfig) -> None:
        super().__init__(config)
        self.spawned: list[ManagedProcess] = []
        self.opening = anyio.Event()
        self.in_turn = anyio.Event()
        self.interrupts = 0

    def launch(self, cwd: str) -> Launch:
        return Launch(argv=(self.config.argv0, CHILD, self.config.child_mode))

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        process = await super().spawn(spec, stderr_observer)
        self.spawned.append(process)
        return process

    async def open(self, child: ProductChild) -> None:
        self.opening.set()
        hello = await child.receive_json()
        if not isinstance(hello, dict) or hello.get("type") != "ready":
            raise child.fail("handshake")

    async def run(self, child: ProductChild) -> str:
        await child.send_json({"task": child.task})
        while True:
            message = await child.receive_json()
            assert isinstance(message, dict)
            if message["type"] == "partial":
                child.output.append(TextBlock(text=message["text"]))
                child.report(AssistantText(text=message["text"]))
                self.in_turn.set()
            elif message["type"] == "usage":
                tokens_in, tokens_out = int(message["input"]), int(message["output"])
                usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
                child.report(UsageUpdated(usage=usage))
            elif message["type"] == "final":
                return str(message["text"])
            elif message["type"] == "failed":
                # Like an SDK that reads its stream to the end: the product's exit is
                # observed before the failure is raised.
                with contextlib.suppress(anyio.EndOfStream):
                    while True:
                        await child.receive_json()
                raise child.fail(str(message["category"]))

    async def interrupt(self, child: ProductChild) -> None:
        self.interrupts += 1


class SkippingEcho(EchoProvider):
    malformed_lines = "skip"


def request(
    task: str, cwd: str | None, cancel: CancelController | None = None
) -> SubagentStartRequest:
    """A one-text-block request from a parent session in ``cwd``."""
    parent = ParentContext(session_id="s", cwd=cwd)
    req = SubagentStartRequest(prompt=(TextBlock(text=task),), parent=parent)
    return req if cancel is None else req.model_copy(update={"cancel": cancel.signal})


def assert_gone(provider: EchoProvider) -> None:
    assert provider.spawned, "the child was never spawned"
    for process in provider.spawned:
        assert not process.tree_alive()
