"""The dsh-subagent-codex error hierarchy.

Public failures surface as :mod:`dsh_subagent` errors (``ProductStartError``,
``ProductTeardownError``, ``SubagentError``) whose messages are fixed safe lines. The
classes here stay internal to a run: they travel on ``__cause__`` chains and in logs,
never into a diagnostic.
"""

from __future__ import annotations

from dsh_subagent import ProductFailure

__all__ = ["CodexError", "CodexFailure", "CodexProtocolError", "CodexTransportClosed"]


class CodexError(Exception):
    """Root of this distribution's internal errors."""


class CodexProtocolError(CodexError):
    """The app-server broke the protocol (a descriptive, payload-free message)."""


class CodexTransportClosed(CodexError):
    """The JSON-RPC stream ended or was closed while a response was awaited."""


class CodexFailure(CodexError):
    """A failure whose safe facts are already decided at the failure site."""

    def __init__(self, failure: ProductFailure) -> None:
        super().__init__(f"subagent-codex: stage {failure.stage}, category {failure.category}")
        self.failure = failure
