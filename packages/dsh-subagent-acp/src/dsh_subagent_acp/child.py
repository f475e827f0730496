"""One ACP agent process and its connection: requests, failure facts and disposal.

The process belongs to dsh-subprocess (own session, whole-tree termination); the
``acp`` library's ``ClientSideConnection`` runs over its pipes through
:class:`~dsh_subagent_acp.transport.NdjsonPipeTransport`. Every failure is turned into
an :class:`~dsh_subagent_acp.errors.AcpFailure` built from observed facts only.
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
from dsh_subagent import COMPLETED, ProductTeardownError, SubagentResult, TextBlock
from dsh_subprocess import ExitFacts, ManagedProcess
from pydantic import ValidationError

from dsh_subagent_acp.client import AcpSessionClient
from dsh_subagent_acp.config import AcpConfig
from dsh_subagent_acp.errors import AcpFailure, Stage
from dsh_subagent_acp.names import PREFIX
from dsh_subagent_acp.stop_reasons import MAX_TURN_REQUESTS_CATEGORY, map_stop_reason
from dsh_subagent_acp.transport import NdjsonPipeTransport

__all__ = ["AcpChild"]

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

_EOF_AFTER_EXIT: Final = 1.0
"""Seconds to let stdout drain after the agent process exited. Frames it wrote before
dying still count; a descendant holding stdout open must not hang the run."""

_CANCEL_SEND_BOUND: Final = 1.0
"""Seconds a best-effort ``session/cancel`` write may take (an agent may stop reading)."""

_KNOWN_ACP_STOP_REASONS: Final = frozenset(
    {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
)


class AcpChild:
    """The ACP side of one run.

    Args:
        config: The provider instance's configuration.
        proc: The agent process, spawned with piped stdin and stdout.
    """

    def __init__(self, config: AcpConfig, proc: ManagedProcess) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise ValueError("the ACP agent needs piped stdin and stdout")
        self._config = config
        self.proc = proc
        self.client = AcpSessionClient(config.permission)
        self._stdout = proc.stdout_until_exit(_EOF_AFTER_EXIT)
        self.transport = NdjsonPipeTransport(proc.stdin, self._stdout)
        # The session client deliberately lacks the fs/* methods the Client protocol
        # lists: the library router then refuses those requests (method not found).
        self.conn = ClientSideConnection(cast(Client, self.client), self.transport)
        self.failure: AcpFailure | None = None
        self._closing = False
        self._turn_open = False
        self._cancel_sent = False

    # -- requests ---------------------------------------------------------------------

    async def _request(self, stage: Stage, op: Callable[[], Awaitable[T]]) -> T:
        """Await one request; failures become facts.

        The wire reads stdout until the agent's exit plus :data:`_EOF_AFTER_EXIT`, so a
        request still pending when the agent died fails even if a descendant holds stdout.
        """
        try:
            return await op()
        except Exception as exc:
            if self._stdout.ended_by_exit:
                # A descendant keeps stdout open after the agent died: no EOF will come.
                raise AcpFailure(
                    _process_stage(stage), "process-exit", self.proc.exit_facts
                ) from exc
            raise await self._classify(stage, exc) from exc

    async def _classify(self, stage: Stage, exc: BaseException) -> AcpFailure:
        if isinstance(exc, AcpFailure):
            return exc
        if isinstance(exc, RequestError):
            return AcpFailure(stage, "error-response")
        if isinstance(exc, ValidationError):
            return AcpFailure(stage, "invalid-response")
        if isinstance(exc, ConnectionError) and not self._closing:
            with anyio.move_on_after(self._config.dispose_grace):
                await self.transport.ended.wait()
            if self.transport.malformed:
                return AcpFailure(stage, "malformed-frame")
            return AcpFailure(_process_stage(stage), "process-exit", await self._exit_facts())
        return AcpFailure(stage, "unknown")

    async def _exit_facts(self) -> ExitFacts | None:
        with anyio.move_on_after(self._config.dispose_grace):
            return await self.proc.wait()
        return self.proc.exit_facts

    async def initialize(self) -> None:
        """``initialize`` with no file-system or terminal capability advertised."""
        response = await self._request(
            "initialize",
            lambda: self.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=CLIENT_INFO,
            ),
        )
        if response.protocol_version != PROTOCOL_VERSION:
            raise AcpFailure("initialize", "protocol-version")

    async def new_session(self, cwd: str) -> None:
        """``session/new`` in ``cwd`` with no MCP servers."""
        response = await self._request(
            "session-new", lambda: self.conn.new_session(cwd=cwd, mcp_servers=[])
        )
        self.client.session_id = response.session_id

    async def prompt(self, texts: list[str]) -> SubagentResult:
        """Run the one turn and map its stop reason (the published attempt).

        Raises:
            AcpFailure: Protocol or process failure, ``max_turn_requests``, or an
                ``end_turn`` without answer text. Also kept in :attr:`failure`.
        """
        session_id = self.client.session_id
        assert session_id is not None
        blocks: list[PromptBlock] = [TextContentBlock(type="text", text=text) for text in texts]
        self._turn_open = True
        try:
            response: PromptResponse = await self._request(
                "prompt", lambda: self.conn.prompt(session_id=session_id, prompt=blocks)
            )
        except AcpFailure as failure:
            self._turn_open = False
            self.failure = failure
            raise
        # A cancelled request leaves the turn open: session/cancel is still owed.
        self._turn_open = False
        try:
            return self._settle_turn(response)
        except AcpFailure as failure:
            self.failure = failure
            raise

    def _settle_turn(self, response: PromptResponse) -> SubagentResult:
        acp_stop = response.stop_reason
        if acp_stop not in _KNOWN_ACP_STOP_REASONS:
            raise AcpFailure("prompt", "invalid-response")
        if acp_stop == "max_turn_requests":
            raise AcpFailure("prompt", MAX_TURN_REQUESTS_CATEGORY)
        stop_reason = map_stop_reason(acp_stop)
        if stop_reason == COMPLETED and not self.client.answer.strip():
            raise AcpFailure("prompt", "blank-answer")
        return SubagentResult(output=self.output(), stop_reason=stop_reason)

    def output(self) -> tuple[TextBlock, ...]:
        """The streamed answer so far as one text block (none when nothing streamed)."""
        answer = self.client.answer
        return (TextBlock(text=answer),) if answer else ()

    def diagnostic(self) -> str | None:
        """The safe line of the recorded failure, with the permission fact if any."""
        if self.failure is None:
            return None
        fact = None
        if self.client.permission_requests:
            fact = (
                f"ACP unattended decision (policy: {self._config.permission}; "
                f"requests: {self.client.permission_requests}; "
                f"approved: {self.client.approved_requests})"
            )
        return self.failure.line(fact)

    # -- cancellation and disposal ----------------------------------------------------

    async def send_cancel(self) -> None:
        """Best-effort ``session/cancel`` for a turn still in flight (bounded, shielded)."""
        session_id = self.client.session_id
        if self._cancel_sent or self._closing or session_id is None or not self._turn_open:
            return
        self._cancel_sent = True
        with anyio.move_on_after(_CANCEL_SEND_BOUND, shield=True):
            try:
                await self.conn.cancel(session_id=session_id)
            except Exception:  # the agent may be gone; the shutdown below still runs
                _log.debug("%s: session/cancel could not be sent", PREFIX, exc_info=True)

    async def shutdown(self) -> None:
        """The two-stage shutdown down to whole-tree exit.

        Closes the connection (the agent's stdin sees EOF), waits up to
        ``dispose_eof_grace`` for the whole tree to exit, then terminates it through
        dsh-subprocess (SIGTERM, ``dispose_grace``, SIGKILL of every descendant) and
        waits for whole-tree exit.

        Raises:
            AcpFailure: ``teardown`` / ``unknown`` when any step failed.
        """
        self._closing = True
        errors: list[BaseException] = []
        try:
            await self.conn.close()
        except Exception as exc:
            errors.append(exc)
        with anyio.move_on_after(self._config.dispose_eof_grace):
            try:
                await self.proc.wait_tree_exit()
            except Exception as exc:
                errors.append(exc)
        # Always: after a cooperative exit it signals nothing (the tree is observed gone)
        # but still releases the process handle and pipes dsh-subprocess owns.
        try:
            await self.proc.terminate()
        except Exception as exc:
            errors.append(exc)
        if errors or self.proc.tree_alive():
            failure = AcpFailure("teardown", "unknown", self.proc.exit_facts)
            if errors:
                raise failure from errors[0]
            raise failure

    async def dispose(self) -> None:
        """Teardown of a published run: ``session/cancel`` first, then :meth:`shutdown`.

        Raises:
            ProductTeardownError: With the safe teardown line.
        """
        await self.send_cancel()
        try:
            await self.shutdown()
        except AcpFailure as failure:
            raise ProductTeardownError(failure.message()) from failure


def _process_stage(stage: Stage) -> Stage:
    # Before publication the failing startup stage is reported; afterwards "process".
    return stage if stage in ("initialize", "session-new") else "process"
