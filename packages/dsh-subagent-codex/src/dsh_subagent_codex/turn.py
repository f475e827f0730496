"""One published turn: ``turn/start`` to ``turn/completed``, final-answer selection,
unattended server requests and the safe facts of every failure.

The state here is per run; nothing is shared between runs or instances. Failures are
raised as ``child.fail(...)`` (a terminal's category) or :class:`CodexProtocolError`
(``unknown`` at the current stage); the latest permission fact is kept current as
``child.detail``, the second line of whatever failure ends the run. What the turn's
notifications say is reported as progress (see progress.py), in frame order.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Final

from dsh_subagent import (
    COMPLETED,
    MAX_TOKENS,
    ProductChild,
    ProductFailure,
    SubagentResult,
    TextBlock,
    TurnStarted,
)
from pydantic import ValidationError

from dsh_subagent_codex.config import PermissionMode
from dsh_subagent_codex.error_info import CONTEXT_WINDOW_EXCEEDED, SANDBOX_ERROR, map_error_info
from dsh_subagent_codex.errors import CodexProtocolError
from dsh_subagent_codex.jsonrpc import Frame, JsonRpcLines
from dsh_subagent_codex.permissions import (
    ELICITATION,
    SUPPORTED_REQUESTS,
    PermissionFact,
    answer_request,
    declined_item_fact,
    sandbox_failure_fact,
)
from dsh_subagent_codex.progress import (
    PROGRESS_METHODS,
    RunUsage,
    item_events,
    progress_events,
    turn_scope,
)
from dsh_subagent_codex.protocol import (
    AgentMessageItem,
    DeclinableItem,
    ItemCompletedParams,
    ServerRequestParams,
    TextInput,
    TurnCompletedParams,
    TurnInterruptParams,
    TurnStartedParams,
    TurnStartParams,
    TurnStartResult,
    TurnTerminal,
)

__all__ = [
    "INTERNAL_ERROR",
    "PRODUCT",
    "AnswerSelection",
    "FactLog",
    "TurnDriver",
    "answer_unexpected",
]

PRODUCT: Final = "Codex"
INTERNAL_ERROR: Final = -32603
MAX_EARLY_PROGRESS: Final = 256
"""Progress-only frames kept while the turn id is not yet committed (the rest dropped)."""


@dataclass
class AnswerSelection:
    """Latest ``final_answer`` and latest ``phase: null`` answers of the turn."""

    final_answer: str | None = None
    unphased: str | None = None

    def selected(self) -> str | None:
        """The answer, or ``None`` when the chosen message is missing or blank.

        A blank later ``final_answer`` does not fall back to an earlier unphased answer:
        the final phase wins even when it is empty.
        """
        text = self.final_answer if self.final_answer is not None else self.unphased
        return text if text is not None and text.strip() else None

    def output(self) -> tuple[TextBlock, ...]:
        """The selection as result output (empty when nothing is selected)."""
        text = self.selected()
        return () if text is None else (TextBlock(text=text),)


@dataclass
class FactLog:
    """The latest permission fact (by observation order)."""

    permission: PermissionFact | None = None
    permission_order: int = -1

    def record_permission(self, order: int, fact: PermissionFact) -> None:
        """Keep ``fact`` unless a fact observed later is already kept."""
        if order >= self.permission_order:
            self.permission, self.permission_order = fact, order


@dataclass
class _Buffered:
    order: int
    frame: Frame


@dataclass
class TurnDriver:
    """Drives one turn over an open thread (the runtime owns the process).

    ``child.stage`` is ``turn-start`` until the ``turn/start`` response commits the turn
    id, then ``turn``; ``child.output`` always holds the current answer selection.
    """

    child: ProductChild
    rpc: JsonRpcLines
    thread_id: str
    mode: PermissionMode
    facts: FactLog = field(default_factory=FactLog)
    answers: AnswerSelection = field(default_factory=AnswerSelection)
    turn_id: str | None = None
    _pending_turn: str | None = None
    _turn_start_id: str | None = None
    _order: int = 0
    _buffered: list[_Buffered] = field(default_factory=list)
    _early_progress: int = 0
    _deferred: list[tuple[int, PermissionFact]] = field(default_factory=list)
    _terminal: SubagentResult | None = None
    _max_tokens: ProductFailure | None = None
    _usage: RunUsage = field(default_factory=RunUsage)
    """The run's share of a resumed thread's total (a fresh thread's total is the run's)."""

    @property
    def committed(self) -> bool:
        """Whether the ``turn/start`` response fixed the turn id."""
        return self.turn_id is not None

    async def run(self) -> SubagentResult:
        """Start the turn with the task's text blocks and consume frames until its terminal.

        Returns:
            ``completed`` with the byte-exact answer, or ``max-tokens`` (partial answer
            and diagnostic) for a ``contextWindowExceeded`` terminal.

        Raises:
            dsh_subagent.ProductFailureError: A terminal failure with its safe facts.
            CodexProtocolError: The app-server broke the protocol.
            anyio.EndOfStream: The output ended before a terminal.
        """
        self.child.stage = "turn-start"
        params = TurnStartParams(
            threadId=self.thread_id,
            input=tuple(TextInput(text=text) for text in self.child.task_texts),
            outputSchema=self.child.output_schema,
        )
        # Without a schema the request is byte-for-byte what it was (no null key).
        self._turn_start_id = await self.rpc.send_request(
            "turn/start", params.model_dump(mode="json", exclude_none=True)
        )
        # Until the turn/start response commits the turn, every read is bounded by the
        # response bound (the frames before it are the turn's first, read in order).
        answered_by = self.child.response_deadline()
        while self._terminal is None:
            if self.committed:
                frame = await self.rpc.next_frame()
            else:
                frame = await self.child.await_response(self.rpc.next_frame, deadline=answered_by)
            self._order += 1
            await self._dispatch(self._order, frame)
        # A request that arrived in the same chunk as the terminal still has to be
        # answered, and an unsupported one still fails the run.
        for frame in self.rpc.take_buffered():
            self._order += 1
            if frame.is_request:
                await self._on_request(self._order, frame)
        if self._max_tokens is not None:
            diagnostic = self.child.failure_line(self._max_tokens, self.child.detail)
            return self._terminal.model_copy(update={"diagnostic": diagnostic})
        return self._terminal

    async def interrupt(self) -> None:
        """Best-effort ``turn/interrupt`` of a known turn; every failure is ignored."""
        if self.turn_id is None:
            return
        params = TurnInterruptParams(threadId=self.thread_id, turnId=self.turn_id)
        # Best effort: the process tree is terminated next anyway.
        with contextlib.suppress(Exception):
            await self.rpc.send_request("turn/interrupt", params.model_dump(mode="json"))

    def _record(self, order: int, fact: PermissionFact) -> None:
        self.facts.record_permission(order, fact)
        if self.facts.permission is not None:
            self.child.detail = self.facts.permission.render(self.mode)

    # -- dispatch ------------------------------------------------------------------------

    async def _dispatch(self, order: int, frame: Frame) -> None:
        if frame.is_response:
            if frame.id == self._turn_start_id and self._turn_start_id is not None:
                await self._on_turn_start_response(frame)
            return
        if frame.is_request:
            await self._on_request(order, frame)
            return
        method = frame.method
        if method == "turn/started":
            self._on_turn_started(frame)
        elif method in ("item/completed", "turn/completed"):
            await self._on_turn_frame(order, frame)
        elif method in PROGRESS_METHODS:
            self._on_progress_frame(order, frame)
        # Every other notification (warnings, the ``error`` notification, …) is ignored:
        # the category comes only from the terminal ``turn/completed``.

    async def _on_turn_start_response(self, frame: Frame) -> None:
        if frame.error is not None:
            if _input_error_code(frame.error) == "input_too_large":
                # The admission check keeps tasks under the limit; should the app-server's
                # limit shrink, the run still says what happened.
                raise self.child.fail("input-too-large")
            raise CodexProtocolError("app-server rejected turn/start")
        try:
            turn_id = TurnStartResult.model_validate(frame.result).turn.id
        except ValidationError as exc:
            raise CodexProtocolError("app-server returned an invalid turn/start response") from exc
        if self._pending_turn is not None and self._pending_turn != turn_id:
            self._deferred.clear()  # a mismatched early request leaves no fact behind
            raise CodexProtocolError("turn/start response did not match the active turn")
        self.turn_id = turn_id
        self.child.stage = "turn"
        for order, fact in self._deferred:
            self._record(order, fact)
        self._deferred.clear()
        buffered, self._buffered = self._buffered, []
        for item in buffered:
            if self._terminal is not None:
                break
            if item.frame.method in PROGRESS_METHODS:
                self._on_progress_frame(item.order, item.frame)
            else:
                await self._on_turn_frame(item.order, item.frame)

    def _claim_turn(self, turn_id: str) -> None:
        """Check an early frame's turn id against the provisional id (before commit)."""
        if self._pending_turn is None:
            self._pending_turn = turn_id
        elif self._pending_turn != turn_id:
            raise CodexProtocolError("app-server referenced conflicting turns")

    def _on_turn_started(self, frame: Frame) -> None:
        try:
            params = TurnStartedParams.model_validate(frame.params)
        except ValidationError as exc:
            raise CodexProtocolError("app-server returned invalid turn/started params") from exc
        if params.threadId != self.thread_id:
            return
        if not self.committed:
            self._claim_turn(params.turn.id)
        elif params.turn.id != self.turn_id:
            return
        self.child.report(TurnStarted())

    def _on_progress_frame(self, order: int, frame: Frame) -> None:
        """Report a progress-only notification of the turn; it never fails the run.

        Before the turn id is committed such frames wait (at most
        :data:`MAX_EARLY_PROGRESS`) with the other early frames, keeping their order.
        """
        scope = turn_scope(frame.params)
        if scope is None or scope[0] != self.thread_id:
            return
        if not self.committed:
            if self._early_progress < MAX_EARLY_PROGRESS:
                self._early_progress += 1
                self._buffered.append(_Buffered(order, frame))
            return
        if scope[1] == self.turn_id:
            for event in progress_events(
                frame.method or "",
                frame.params,
                include_commands=self.child.include_commands,
                usage=self._usage if self.child.resume is not None else None,
            ):
                self.child.report(event)

    def _report_item(self, item: dict[str, Any]) -> None:
        try:
            events = item_events(item, started=False, include_commands=self.child.include_commands)
        except ValidationError:
            return  # progress is best effort (see progress.py)
        for event in events:
            self.child.report(event)

    async def _on_turn_frame(self, order: int, frame: Frame) -> None:
        method = frame.method
        model = ItemCompletedParams if method == "item/completed" else TurnCompletedParams
        try:
            params = model.model_validate(frame.params)
        except ValidationError as exc:
            raise CodexProtocolError(f"app-server returned invalid {method} params") from exc
        if params.threadId != self.thread_id:
            return
        turn_id = params.turnId if isinstance(params, ItemCompletedParams) else params.turn.id
        if not self.committed:
            self._claim_turn(turn_id)
            self._buffered.append(_Buffered(order, frame))
            return
        if turn_id != self.turn_id:
            return
        if isinstance(params, ItemCompletedParams):
            self._on_item(order, params.item)
        else:
            self._on_terminal(order, params.turn)

    def _on_item(self, order: int, item: dict[str, Any]) -> None:
        self._report_item(item)
        kind = item.get("type")
        if kind == "agentMessage":
            try:
                message = AgentMessageItem.model_validate(item)
            except ValidationError as exc:
                raise CodexProtocolError("app-server returned an invalid agent message") from exc
            # Only final_answer and the phase-less compatibility answer can answer;
            # commentary and 0.163.0's partial_answer ("may be followed by more output")
            # never do.
            if message.phase == "final_answer":
                self.answers.final_answer = message.text
            elif message.phase is None:
                self.answers.unphased = message.text
            self.child.output[:] = self.answers.output()  # partial output if the run ends
        elif kind in ("commandExecution", "fileChange"):
            try:
                declinable = DeclinableItem.model_validate(item)
            except ValidationError as exc:
                raise CodexProtocolError(f"app-server returned an invalid {kind} item") from exc
            if declinable.status == "declined":
                self._record(order, declined_item_fact(declinable.type))

    def _on_terminal(self, order: int, turn: TurnTerminal) -> None:
        if turn.status == "completed":
            answer = self.answers.selected()
            if answer is None:
                raise self.child.fail("unknown", stage="turn")
            self._terminal = SubagentResult(output=(TextBlock(text=answer),), stop_reason=COMPLETED)
            return
        if turn.status == "interrupted":
            # Not a local cancellation (that settles before any terminal is read): the
            # child side stopped the turn, and the parent should be able to tell.
            raise self.child.fail("interrupted", stage="turn")
        error = turn.error
        info = map_error_info(error.get("codexErrorInfo") if isinstance(error, dict) else None)
        if info.category == SANDBOX_ERROR:
            self._record(order, sandbox_failure_fact())
        if info.category == CONTEXT_WINDOW_EXCEEDED:
            self._max_tokens = ProductFailure(PRODUCT, "turn", info.category, info.http_status)
            self._terminal = SubagentResult(output=self.answers.output(), stop_reason=MAX_TOKENS)
            return
        raise self.child.fail(info.category, stage="turn", http_status=info.http_status)

    # -- server requests -----------------------------------------------------------------

    async def _on_request(self, order: int, frame: Frame) -> None:
        method = frame.method or ""
        try:
            fact, result, turnless = self._decide(method, frame.params)
        except CodexProtocolError as exc:
            await _answer_error(self.rpc, frame.id, str(exc))
            raise
        await self.rpc.respond(frame.id, result)
        # Requests are answered at once; before commit their fact waits for the
        # turn/start response to confirm the turn (keeping its original order).
        if self.committed or turnless:
            self._record(order, fact)
        else:
            self._deferred.append((order, fact))

    def _decide(self, method: str, raw_params: Any) -> tuple[PermissionFact, dict[str, Any], bool]:
        if method not in SUPPORTED_REQUESTS:
            raise CodexProtocolError(f'unsupported app-server request "{method}"')
        try:
            params = ServerRequestParams.model_validate(raw_params)
        except ValidationError as exc:
            raise CodexProtocolError("app-server sent an invalid request") from exc
        if params.threadId != self.thread_id:
            raise CodexProtocolError("app-server request referenced another thread")
        turnless = method == ELICITATION and params.turnId is None
        if not turnless:
            if not params.turnId:
                raise CodexProtocolError("app-server request referenced another turn")
            if self.committed:
                if params.turnId != self.turn_id:
                    raise CodexProtocolError("app-server request referenced another turn")
            else:
                self._claim_turn(params.turnId)
        answer = answer_request(method, params.availableDecisions)
        return answer.fact, answer.result, turnless


def _input_error_code(error: Any) -> object:
    """``error.data.input_error_code`` of a JSON-RPC error, else ``None`` (never its text)."""
    data = error.get("data") if isinstance(error, dict) else None
    return data.get("input_error_code") if isinstance(data, dict) else None


async def _answer_error(rpc: JsonRpcLines, request_id: Any, message: str) -> None:
    with contextlib.suppress(Exception):  # the run fails either way; a dead pipe is moot
        await rpc.respond_error(request_id, INTERNAL_ERROR, message)


async def answer_unexpected(rpc: JsonRpcLines, frame: Frame) -> None:
    """Refuse a server request that arrived before any turn exists, then fail."""
    await _answer_error(rpc, frame.id, "app-server referenced a turn before turn/start")
    raise CodexProtocolError("app-server referenced a turn before turn/start")
