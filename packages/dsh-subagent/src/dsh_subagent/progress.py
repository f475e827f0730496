"""Live progress of a run and the usage a product reports: what the host and its people see.

Progress is what the product said, turned into a small provider-neutral vocabulary; the
runtime synthesises nothing (no heartbeats). It is for the host, never for the model: it
does not enter the result, the diagnostic or any model-facing tool text.

Progress carries product text (assistant text, tool names, file paths, and command text
when the host opts in), so the diagnostic's secret rules do not cover it; environment
values and layered credentials are still never put into it by a provider.

A run's :class:`ProgressStream` never blocks the run: it keeps at most ``maxlen`` events
for a slow reader, drops the oldest beyond that and counts what it dropped; listeners
are called synchronously and their failures are logged. It ends when the run settles.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Annotated, Final, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

__all__ = [
    "DEFAULT_PROGRESS_BUFFER",
    "AssistantText",
    "FileChanged",
    "PlanStep",
    "PlanUpdated",
    "ProgressEvent",
    "ProgressListener",
    "ProgressStream",
    "ToolFinished",
    "ToolStarted",
    "TurnStarted",
    "Usage",
    "UsageUpdated",
]

_log = logging.getLogger("dsh_subagent")

DEFAULT_PROGRESS_BUFFER: Final = 1024
"""Events a run keeps for a reader that has not caught up (the oldest go first)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Usage(BaseModel):
    """What the product reported it used; ``None`` for what it did not report.

    Never estimated: a provider fills only what its product stated.

    Attributes:
        input_tokens: Prompt tokens, cached ones included.
        cached_input_tokens: The part of ``input_tokens`` served from a cache.
        output_tokens: Generated tokens, reasoning included.
        reasoning_tokens: The part of ``output_tokens`` spent reasoning.
        cost_usd: Cost in US dollars, when the product states one.
    """

    model_config = _FROZEN
    input_tokens: NonNegativeInt | None = None
    cached_input_tokens: NonNegativeInt | None = None
    output_tokens: NonNegativeInt | None = None
    reasoning_tokens: NonNegativeInt | None = None
    cost_usd: NonNegativeFloat | None = None

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens, when both were reported."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


class TurnStarted(BaseModel):
    """The product started working on the task (a turn, a prompt)."""

    model_config = _FROZEN
    kind: Literal["turn-started"] = "turn-started"


class AssistantText(BaseModel):
    """Assistant text: a streamed piece (``delta``) or a complete message."""

    model_config = _FROZEN
    kind: Literal["assistant-text"] = "assistant-text"
    text: str
    delta: bool = False


class ToolStarted(BaseModel):
    """The product started a tool.

    Attributes:
        tool_kind: A coarse, provider-neutral kind: ``command``, ``file-edit``,
            ``file-read``, ``search``, ``web``, ``mcp``, ``agent`` or ``other``.
        name: The product's tool name (e.g. ``Bash``, ``commandExecution``).
        call_id: The product's id of this call, pairing it with :class:`ToolFinished`.
        command: The command text, only when the host opted in (``progress_commands``).
    """

    model_config = _FROZEN
    kind: Literal["tool-started"] = "tool-started"
    tool_kind: str
    name: str
    call_id: str | None = None
    command: str | None = None


class ToolFinished(BaseModel):
    """A tool the product ran has finished; ``ok`` when the product said how it went."""

    model_config = _FROZEN
    kind: Literal["tool-finished"] = "tool-finished"
    tool_kind: str
    name: str
    call_id: str | None = None
    ok: bool | None = None


class FileChanged(BaseModel):
    """The product changed a file (the path as the product reported it)."""

    model_config = _FROZEN
    kind: Literal["file-changed"] = "file-changed"
    path: str


class PlanStep(BaseModel):
    """One step of the product's plan."""

    model_config = _FROZEN
    text: str
    status: str | None = None


class PlanUpdated(BaseModel):
    """The product's current plan, whole."""

    model_config = _FROZEN
    kind: Literal["plan-updated"] = "plan-updated"
    steps: tuple[PlanStep, ...]


class UsageUpdated(BaseModel):
    """The usage so far, as the product reported it (cumulative for the run)."""

    model_config = _FROZEN
    kind: Literal["usage-updated"] = "usage-updated"
    usage: Usage


ProgressEvent = Annotated[
    TurnStarted
    | AssistantText
    | ToolStarted
    | ToolFinished
    | FileChanged
    | PlanUpdated
    | UsageUpdated,
    Field(discriminator="kind"),
]
"""One progress event; ``event.kind`` tells which."""

ProgressListener = Callable[[ProgressEvent], None]


class ProgressStream:
    """One run's progress: a bounded buffer for readers and synchronous listeners.

    ``emit`` never blocks and never raises. Iterate with ``async for event in stream``
    (one reader; it ends once the run settled and every kept event was read) or register
    a listener with :meth:`add_listener`.

    Args:
        maxlen: Events kept for the reader; beyond it the oldest is dropped and counted.
    """

    def __init__(self, maxlen: int = DEFAULT_PROGRESS_BUFFER) -> None:
        if maxlen <= 0:
            raise ValueError("maxlen must be positive")
        self._events: collections.deque[ProgressEvent] = collections.deque(maxlen=maxlen)
        self._listeners: list[ProgressListener] = []
        self._wakeup = anyio.Event()
        self._closed = False
        self.dropped = 0
        """How many events the reader never saw because the buffer was full."""
        self.last: ProgressEvent | None = None
        """The latest event (listeners and summaries use it; never dropped)."""
        self.usage: Usage | None = None
        """The latest usage reported."""

    @property
    def closed(self) -> bool:
        """Whether the run has settled (no event follows)."""
        return self._closed

    def add_listener(self, listener: ProgressListener) -> Callable[[], None]:
        """Call ``listener(event)`` for every later event; returns its remover."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def emit(self, event: ProgressEvent) -> None:
        """Record ``event`` (ignored once the run settled). Never blocks or raises."""
        if self._closed:
            return
        if len(self._events) == self._events.maxlen:
            self.dropped += 1
        self._events.append(event)
        self.last = event
        if isinstance(event, UsageUpdated):
            self.usage = event.usage
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                _log.exception("dsh_subagent: a progress listener raised")
        self._wake()

    def close(self) -> None:
        """End the stream: the run settled."""
        if not self._closed:
            self._closed = True
            self._listeners.clear()
            self._wake()

    def _wake(self) -> None:
        self._wakeup.set()
        self._wakeup = anyio.Event()

    def __aiter__(self) -> ProgressStream:
        return self

    async def __anext__(self) -> ProgressEvent:
        while not self._events:
            if self._closed:
                raise StopAsyncIteration
            await self._wakeup.wait()
        return self._events.popleft()
