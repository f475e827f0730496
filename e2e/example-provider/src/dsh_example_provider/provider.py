"""The example out-of-process provider: one scripted child process per run.

Everything but the child's own protocol — cwd resolution, the spawn, cancellation at
every phase, settlement, diagnostics and whole-tree teardown — is the runtime's
(:class:`dsh_subagent.ProductProvider`).
"""

from __future__ import annotations

import sys
from typing import ClassVar

from dsh_subagent import Launch, ProductChild, ProductProvider

from dsh_example_provider.config import ExampleConfig

__all__ = ["ExampleProvider"]


class ExampleProvider(ProductProvider[ExampleConfig]):
    """A third-party provider around a scripted child program (``dsh_example_provider.child``).

    Wire protocol, one JSON object per line: the child says ``{"type": "ready"}``, gets
    ``{"task": ...}`` and answers ``{"type": "final", "text": ...}`` or
    ``{"type": "error", "message": ...}``, whose raw message is never kept.
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
            if message.get("type") == "final":
                return str(message.get("text", ""))
            if message.get("type") == "error":
                raise child.fail("child-error")
