"""One run's ACP session: the ``acp`` library's connection over the run's wire.

The process, its stdout reader and its teardown belong to the provider runtime
(:class:`dsh_subagent.ProductChild`); this module speaks ACP over them and turns every
failure into a :class:`~dsh_subagent.ProductFailureError` built from observed facts
only (stage, category and the permission fact; the runtime merges the exit facts).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, cast

import anyio
from acp import PROTOCOL_VERSION, Client, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AudioContentBlock,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    PromptResponse,
    ResourceContentBlock,
    TextContentBlock,
)
from dsh_subagent import (
    COMPLETED,
    CONTINUATION_UNAVAILABLE_CATEGORY,
    CONTINUATION_UNSUPPORTED_CATEGORY,
    ProductChild,
    ProductFailureError,
    SubagentResult,
    TextBlock,
    text_of,
)
from pydantic import ValidationError

from dsh_subagent_acp.client import AcpSessionClient
from dsh_subagent_acp.config import AcpConfig
from dsh_subagent_acp.progress import AcpProgress
from dsh_subagent_acp.stop_reasons import MAX_TURN_REQUESTS_CATEGORY, map_stop_reason
from dsh_subagent_acp.transport import LineTransport

__all__ = ["AcpSession"]

_log = logging.getLogger("dsh_subagent_acp")

T = TypeVar("T")
PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)

CLIENT_INFO: Final = Implementation(name="dsh-subagent-acp", version="0.1.0")

_KNOWN_ACP_STOP_REASONS: Final = frozenset(
    {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)


class AcpSession:
    """The ACP side of one run, from ``initialize`` to the end of its one turn.

    Args:
        child: The run's product process and wire (the runtime's).
        config: The provider instance's configuration.
    """

    def __init__(self, child: ProductChild, config: AcpConfig) -> None:
        self._child = child
        self._config = config
        self.progress = AcpProgress(child.report, include_commands=child.include_commands)
        self.client = AcpSessionClient(config.permission, child.output, self.progress)
        self.transport = LineTransport(child)
        # The session client deliberately lacks the fs/* methods the Client protocol
        # lists: the library router then refuses those requests (method not found).
        self._conn = ClientSideConnection(cast(Client, self.client), self.transport)
        self._turn_open = False
        self._session_id: str | None = None

    # -- failures ---------------------------------------------------------------------

    def _fail(self, category: str, *, stage: str | None = None) -> ProductFailureError:
        return self._child.fail(category, stage=stage, detail=self.client.permission_fact())

    async def _request(
        self, op: Callable[[], Awaitable[T]], *, refused: str = "error-response"
    ) -> T:
        """Await one request; every failure becomes a safe fact of the current stage
        (an error answer the ``refused`` category)."""
        try:
            return await op()
        except RequestError as exc:
            raise self._fail(refused) from exc
        except ValidationError as exc:
            raise self._fail("invalid-response") from exc
        except ConnectionError as exc:
            # The library rejects pending requests when stdout ends or stdin breaks:
            # let the reader reach the end to learn whether a bad frame caused it.
            with anyio.move_on_after(self._config.dispose_grace):
                await self.transport.ended.wait()
            if self.transport.fault is not None:
                raise self._fail(self.transport.fault) from exc
            # Before publication the startup stage is reported; afterwards "process".
            stage = "process" if self._child.stage == "prompt" else self._child.stage
            raise self._fail("process-exit", stage=stage) from exc
        except Exception as exc:
            raise self._fail("unknown") from exc

    # -- the protocol -----------------------------------------------------------------

    async def open(self, cwd: str) -> None:
        """``initialize`` with no file-system or terminal capability, then ``session/new``
        in ``cwd`` with no MCP servers, or ``session/load`` of the session the run
        continues (only when the agent advertised ``loadSession``). On any failure the
        connection is closed.

        The session's updates count only from the prompt on: what ``session/load``
        replays of the earlier turns is not this run's output or progress.
        """
        # Each response is bounded (response_timeout_seconds): an agent that cannot read a
        # request may never answer it. session/prompt is not: its response ends the turn.
        bounded = self._child.await_response
        try:
            response = await bounded(
                lambda: self._request(
                    lambda: self._conn.initialize(
                        protocol_version=PROTOCOL_VERSION,
                        client_capabilities=ClientCapabilities(),
                        client_info=CLIENT_INFO,
                    )
                )
            )
            if response.protocol_version != PROTOCOL_VERSION:
                raise self._fail("protocol-version")
            capabilities = response.agent_capabilities
            loads = capabilities is not None and capabilities.load_session is True
            resume = self._child.resume
            if resume is not None:
                self._child.stage = "session-load"
                if not loads:
                    raise self._fail(CONTINUATION_UNSUPPORTED_CATEGORY)
                # An error answer: the agent does not have the session (never kept,
                # removed, another home).
                await bounded(
                    lambda: self._request(
                        lambda: self._conn.load_session(cwd=cwd, session_id=resume, mcp_servers=[]),
                        refused=CONTINUATION_UNAVAILABLE_CATEGORY,
                    )
                )
                self._session_id = resume
            else:
                self._child.stage = "session-new"
                session = await bounded(
                    lambda: self._request(lambda: self._conn.new_session(cwd=cwd, mcp_servers=[]))
                )
                self._session_id = self.client.session_id = session.session_id
            if loads and self._config.continuation:
                self._child.session_id = self._session_id
        except BaseException:
            await self.close()
            raise

    async def prompt(self) -> SubagentResult:
        """The one turn, mapped to a result; the connection is closed afterwards."""
        session_id = self._session_id
        assert session_id is not None
        self.client.session_id = session_id  # a loaded session's replay is behind us
        blocks: list[PromptBlock] = [
            TextContentBlock(type="text", text=text) for text in self._child.task_texts
        ]
        self._turn_open = True
        try:
            response: PromptResponse = await self._request(
                lambda: self._conn.prompt(session_id=session_id, prompt=blocks)
            )
        except Exception:
            self._turn_open = False
            raise
        finally:
            # A cancelled turn stays open: interrupt() then owes it session/cancel.
            await self.close()
            self._merge_output()
        self._turn_open = False
        self.progress.on_prompt_usage(response.usage)
        return self._settle_turn(response)

    def _merge_output(self) -> None:
        # Chunks arrive as separate blocks; the answer (or partial output) is one.
        output = self._child.output
        text = text_of(output)
        output[:] = [TextBlock(text=text)] if text else []

    def _settle_turn(self, response: PromptResponse) -> SubagentResult:
        acp_stop = response.stop_reason
        if acp_stop not in _KNOWN_ACP_STOP_REASONS:
            raise self._fail("invalid-response")
        if acp_stop == "max_turn_requests":
            raise self._fail(MAX_TURN_REQUESTS_CATEGORY)
        stop_reason = map_stop_reason(acp_stop)
        if stop_reason == COMPLETED and not text_of(self._child.output).strip():
            raise self._fail("blank-answer")
        return SubagentResult(
            output=tuple(self._child.output), stop_reason=stop_reason, usage=self.progress.usage
        )

    async def cancel(self) -> None:
        """``session/cancel`` for a turn still in flight; nothing otherwise.

        Written straight to the wire: the library connection may already be closed.
        """
        session_id = self.client.session_id
        if not self._turn_open or session_id is None:
            return
        self._turn_open = False
        notification = {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": session_id},
        }
        try:
            await self.transport.send(notification)
        except ConnectionError:  # the agent is gone; the runtime ends the tree anyway
            _log.debug("session/cancel could not be sent: the agent's stdin is closed")

    async def close(self) -> None:
        """Stop the library's reader and handler tasks (shielded, idempotent)."""
        with anyio.CancelScope(shield=True):
            await self._conn.close()
