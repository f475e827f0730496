"""The error hierarchy of dsh-subagent-claude-code.

Every error a caller can see subclasses :class:`dsh_subagent.SubagentError`; startup and
teardown failures use the shared :class:`~dsh_subagent.ProductStartError` and
:class:`~dsh_subagent.ProductTeardownError` with the fixed safe line as message.
"""

from __future__ import annotations

from dsh_subagent import SubagentError, SubagentErrorCode

__all__ = ["ClaudeCodeError", "StartAborted"]


class ClaudeCodeError(SubagentError):
    """An internal product-setup failure; never shown raw (it rides on ``__cause__``)."""

    def __init__(self, message: str) -> None:
        super().__init__(SubagentErrorCode.PRODUCT_START_FAILED, message)


class StartAborted(SubagentError):
    """The request's cancel signal fired before the run was published."""

    def __init__(self) -> None:
        super().__init__(
            SubagentErrorCode.PRODUCT_START_FAILED,
            "subagent-claude-code: request was aborted before SDK startup",
        )
