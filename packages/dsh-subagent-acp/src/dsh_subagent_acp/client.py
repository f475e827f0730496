"""The client side of one ACP session: what the agent may ask of us, and what we keep.

The ``acp`` library dispatches agent-to-client calls to methods of this object by name.
Only two are served: ``session/update`` (the streamed answer, and the run's progress) and
``session/request_permission`` (answered by policy, never shown to a person). File-system
and terminal capabilities are not advertised, and every other agent request is refused
with JSON-RPC ``-32601`` (method not found): the library would otherwise answer the
optional terminal methods with ``null`` on our behalf, which an agent could read as
success.
"""

from __future__ import annotations

from typing import Any, NoReturn

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
)
from dsh_subagent import ContentBlock, TextBlock

from dsh_subagent_acp.config import PermissionPolicy
from dsh_subagent_acp.permissions import answer_permission
from dsh_subagent_acp.progress import AcpProgress

__all__ = ["AcpSessionClient"]


def _refuse(method: str) -> NoReturn:
    raise RequestError.method_not_found(method)


class AcpSessionClient:
    """Collects one session's answer and answers its permission requests.

    Args:
        policy: The unattended permission policy.
        output: Where each answer chunk is appended as it arrives (the run's output).
        progress: Where the session's updates are reported as progress, if anywhere.

    Attributes:
        session_id: The session whose updates count; ``None`` until ``session/new``
            answered (updates before that are ignored).
        permission_requests: How many permission requests were answered.
        approved_requests: How many of them were approved (only under ``allow``).
    """

    def __init__(
        self,
        policy: PermissionPolicy,
        output: list[ContentBlock],
        progress: AcpProgress | None = None,
    ) -> None:
        self._policy = policy
        self._output = output
        self._progress = progress
        self.session_id: str | None = None
        self.permission_requests = 0
        self.approved_requests = 0

    def permission_fact(self) -> str | None:
        """The diagnostic's second safe line once a permission request was answered."""
        if not self.permission_requests:
            return None
        return (
            f"ACP unattended decision (policy: {self._policy}; "
            f"requests: {self.permission_requests}; approved: {self.approved_requests})"
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Keep ``agent_message_chunk`` text of our session and report our session's
        updates as progress; updates of any other session are dropped."""
        if session_id != self.session_id:
            return
        if self._progress is not None:
            self._progress.on_update(update)
        if not isinstance(update, AgentMessageChunk):
            return
        if isinstance(update.content, TextContentBlock) and update.content.text:
            self._output.append(TextBlock(text=update.content.text))

    async def request_permission(
        self,
        options: list[PermissionOption],
        session_id: str,
        tool_call: Any,
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        """Answer by policy; see :func:`dsh_subagent_acp.permissions.answer_permission`."""
        response = answer_permission(self._policy, options)
        self.permission_requests += 1
        outcome = response.outcome
        if outcome.outcome == "selected" and any(
            option.option_id == outcome.option_id and option.kind.startswith("allow")
            for option in options
        ):
            self.approved_requests += 1
        return response

    # Terminal methods are "optional" in the library router, which answers ``null`` for a
    # client that lacks them; defining them here turns that into an explicit refusal.
    async def create_terminal(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the terminal capability is not advertised."""
        _refuse("terminal/create")

    async def terminal_output(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the terminal capability is not advertised."""
        _refuse("terminal/output")

    async def release_terminal(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the terminal capability is not advertised."""
        _refuse("terminal/release")

    async def wait_for_terminal_exit(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the terminal capability is not advertised."""
        _refuse("terminal/wait_for_exit")

    async def kill_terminal(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the terminal capability is not advertised."""
        _refuse("terminal/kill")
