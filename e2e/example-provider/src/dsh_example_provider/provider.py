"""The example out-of-process provider: one scripted child process per run.

Everything but the child's own protocol — cwd resolution, the spawn, cancellation at
every phase, settlement, diagnostics and whole-tree teardown — is the runtime's
(:class:`dsh_subagent.ProductProvider`).
"""

from __future__ import annotations

import sys
from typing import ClassVar

from dsh_subagent import (
    AssistantText,
    Launch,
    ProductChild,
    ProductProvider,
    ToolStarted,
    Usage,
    UsageUpdated,
)

from dsh_example_provider.config import ExampleConfig

__all__ = ["ExampleProvider"]


class ExampleProvider(ProductProvider[ExampleConfig]):
    """A third-party provider around a scripted child program (``dsh_example_provider.child``).

    Wire protocol, one JSON object per line: the child says ``{"type": "ready"}``, gets
    ``{"task": ...}``, may report ``text`` / ``tool`` / ``usage`` progress and answers
    ``{"type": "final", "text": ...}`` or ``{"type": "error", "message": ...}``, whose
    raw message is never kept.
    """

    Config: ClassVar[type[ExampleConfig]] = ExampleConfig
    product: ClassVar[str] = "Example"

    def launch(self, cwd: str) -> Launch:
        return Launch(argv=(sys.executable, "-m", "dsh_example_provider.child"))

    async def open(self, child: ProductChild) -> None:
        hello = await child.receive_json()
        if not isinstance(hello, dict) or hello.get("type") != "ready":
            raise child.fail("handshake")

    async def run(self, child: ProductChild) -> str:
        await child.send_json({"task": child.task})
        while True:
            message = await child.receive_json()
            if not isinstance(message, dict):
                continue
            kind = message.get("type")
            if kind == "final":
                return str(message.get("text", ""))
            if kind == "error":
                raise child.fail("child-error")
            report_progress(child, message)


def report_progress(child: ProductChild, message: dict[str, object]) -> None:
    """Map one of the child's progress messages to a progress event (unknown ones: none).

    Only what the child said is reported; its command text only when the host opted in.
    """
    kind = message.get("type")
    if kind == "text":
        child.report(AssistantText(text=str(message.get("text", "")), delta=True))
    elif kind == "tool":
        command = str(message.get("command", ""))
        child.report(
            ToolStarted(
                tool_kind="command",
                name=str(message.get("name", "")),
                command=command if child.include_commands else None,
            )
        )
    elif kind == "usage":
        usage = Usage(
            input_tokens=_count(message.get("input_tokens")),
            output_tokens=_count(message.get("output_tokens")),
        )
        child.report(UsageUpdated(usage=usage))


def _count(value: object) -> int | None:
    """A token count the child stated, or ``None`` (never a guess)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
