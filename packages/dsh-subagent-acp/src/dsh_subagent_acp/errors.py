"""The dsh-subagent-acp error hierarchy.

Callers see the core's :class:`~dsh_subagent.ProductStartError` (``start()``) and
:class:`~dsh_subagent.ProductTeardownError` (``dispose()``) carrying the safe line;
:class:`AcpFailure` is the internal, allowlisted description those lines are built from.
The agent's own error text never reaches a message: it stays on ``__cause__`` only.
"""

from __future__ import annotations

from typing import Literal

from dsh_subagent import ProductFailure, format_product_failure
from dsh_subprocess import ExitFacts

from dsh_subagent_acp.names import PREFIX, PRODUCT

__all__ = ["AcpError", "AcpFailure", "Category", "Stage"]

Stage = Literal["initialize", "session-new", "prompt", "process", "teardown"]
"""Where a run failed: the two startup requests, the published turn, the agent process
after publication, and disposal."""

Category = Literal[
    "spawn-failed",
    "process-exit",
    "malformed-frame",
    "error-response",
    "invalid-response",
    "protocol-version",
    "max-turn-requests",
    "blank-answer",
    "unsupported-backend",
    "unknown",
]
"""What went wrong, from facts the provider observed itself (never the agent's text).

* ``spawn-failed``: the agent program could not be started.
* ``process-exit``: the agent's stdout ended or its process exited before answering.
* ``malformed-frame``: the agent wrote something that is not a JSON-RPC frame.
* ``error-response``: the agent answered the request with a JSON-RPC error.
* ``invalid-response``: the answer does not match the ACP schema.
* ``protocol-version``: the agent speaks another ACP protocol version.
* ``max-turn-requests``: the turn ended at the agent's own request limit.
* ``blank-answer``: ``end_turn`` without any answer text.
* ``unsupported-backend``: started outside asyncio (the ``acp`` library needs it).
* ``unknown``: anything else (teardown failures included).
"""


class AcpError(Exception):
    """Root of the errors this distribution defines."""


class AcpFailure(AcpError):
    """One observed failure, described only by allowlisted facts.

    Attributes:
        stage: Where it happened.
        category: What happened.
        exit: The agent process's exit facts when they were observed.
    """

    def __init__(self, stage: Stage, category: Category, exit: ExitFacts | None = None) -> None:
        self.stage: Stage = stage
        self.category: Category = category
        self.exit = exit
        super().__init__(self.line())

    def line(self, permission_fact: str | None = None) -> str:
        """The shared safe failure line for this failure."""
        return format_product_failure(
            ProductFailure(
                product=PRODUCT,
                stage=self.stage,
                category=self.category,
                exit_code=self.exit.exit_code if self.exit else None,
                signal=self.exit.signal if self.exit else None,
            ),
            permission_fact,
        )

    def message(self) -> str:
        """The error message form: ``subagent-acp: <line>``."""
        return f"{PREFIX}: {self.line()}"
