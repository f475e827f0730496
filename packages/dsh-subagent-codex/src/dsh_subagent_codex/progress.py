"""What the app-server says while a turn runs, as dsh-subagent's progress events.

Pure mapping, no I/O: the turn driver decides which frames belong to the run's turn and
reports what :func:`progress_events` returns. Only what Codex stated is reported.

* ``item/started`` of a tool item → :class:`~dsh_subagent.ToolStarted`;
* ``item/completed`` of a tool item → :class:`~dsh_subagent.ToolFinished`, and for a
  completed ``fileChange`` one :class:`~dsh_subagent.FileChanged` per changed path;
* ``item/completed`` of an ``agentMessage`` → a complete :class:`~dsh_subagent.AssistantText`;
* ``item/agentMessage/delta`` → a streamed piece (``delta=True``);
* ``turn/plan/updated`` → :class:`~dsh_subagent.PlanUpdated`;
* ``thread/tokenUsage/updated`` → :class:`~dsh_subagent.UsageUpdated` from
  ``tokenUsage.total`` (cumulative for the thread). A resumed thread's total includes
  earlier delegations, so with a :class:`RunUsage` the run reports its own part: the
  total less what the thread had used before the turn's first model response
  (``total - last`` of the turn's first update).

Progress is best effort: a progress notification whose consumed fields have the wrong
shape is dropped (logged at debug level) instead of failing the run, because the run's
outcome never depends on it. Command text is copied only when the host opted in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    Usage,
    UsageUpdated,
)
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "PROGRESS_METHODS",
    "TOOL_KINDS",
    "RunUsage",
    "item_events",
    "progress_events",
    "turn_scope",
]

_log = logging.getLogger("dsh_subagent_codex")

_RECEIVE = ConfigDict(frozen=True, extra="ignore")

TOOL_KINDS: Final[dict[str, str]] = {
    "commandExecution": "command",
    "fileChange": "file-edit",
    "mcpToolCall": "mcp",
    "dynamicToolCall": "other",
    "collabAgentToolCall": "agent",
    "webSearch": "web",
    "imageView": "file-read",
    "imageGeneration": "other",
}
"""Thread item types that are tool uses, and their provider-neutral tool kind."""

_NAMED_BY_TOOL: Final = frozenset({"mcpToolCall", "dynamicToolCall", "collabAgentToolCall"})
"""Items that carry the tool's own name in ``tool`` (the others are named by their type)."""

_OK_BY_STATUS: Final[dict[str, bool]] = {
    "completed": True,
    "failed": False,
    "declined": False,
    "interrupted": False,
}

PROGRESS_METHODS: Final = frozenset(
    {
        "item/started",
        "item/agentMessage/delta",
        "turn/plan/updated",
        "thread/tokenUsage/updated",
    }
)
"""Turn-scoped notifications read only for progress (``item/completed`` is read anyway)."""


class _TurnScope(BaseModel):
    model_config = _RECEIVE
    threadId: str
    turnId: str


class _Change(BaseModel):
    model_config = _RECEIVE
    path: str


class _ToolItem(BaseModel):
    """The consumed fields of a tool item (each item type has only some of them)."""

    model_config = _RECEIVE
    type: str
    id: str
    status: str | None = None
    command: str | None = None
    tool: str | None = None
    success: bool | None = None
    changes: tuple[_Change, ...] = ()


class _AgentMessage(BaseModel):
    model_config = _RECEIVE
    text: str


class _ItemParams(BaseModel):
    model_config = _RECEIVE
    item: dict[str, Any]


class _Delta(BaseModel):
    model_config = _RECEIVE
    delta: str


class _PlanStep(BaseModel):
    model_config = _RECEIVE
    step: str
    status: str


class _Plan(BaseModel):
    model_config = _RECEIVE
    plan: tuple[_PlanStep, ...]


class _Breakdown(BaseModel):
    model_config = _RECEIVE
    inputTokens: int
    cachedInputTokens: int
    outputTokens: int
    reasoningOutputTokens: int


class _TokenUsage(BaseModel):
    model_config = _RECEIVE
    total: _Breakdown
    last: _Breakdown | None = None


class _TokenUsageParams(BaseModel):
    model_config = _RECEIVE
    tokenUsage: _TokenUsage


def turn_scope(params: object) -> tuple[str, str] | None:
    """``(threadId, turnId)`` of a turn-scoped notification, ``None`` when malformed."""
    try:
        scope = _TurnScope.model_validate(params)
    except ValidationError:
        return None
    return scope.threadId, scope.turnId


def _tool_name(item: _ToolItem) -> str:
    if item.type in _NAMED_BY_TOOL and item.tool:
        return item.tool
    return item.type


def item_events(
    item: dict[str, Any], *, started: bool, include_commands: bool
) -> tuple[ProgressEvent, ...]:
    """The progress of one thread item at its ``item/started`` or ``item/completed``.

    Raises:
        ValidationError: A consumed field has the wrong type.
    """
    kind = item.get("type")
    if kind == "agentMessage":
        if started:
            return ()  # its text streams as deltas and arrives whole at completion
        text = _AgentMessage.model_validate(item).text
        return (AssistantText(text=text),) if text else ()
    if not isinstance(kind, str) or kind not in TOOL_KINDS:
        return ()  # user messages, reasoning, plans, compaction, … are no tool use
    tool = _ToolItem.model_validate(item)
    tool_kind, name = TOOL_KINDS[kind], _tool_name(tool)
    if started:
        command = tool.command if include_commands and kind == "commandExecution" else None
        return (ToolStarted(tool_kind=tool_kind, name=name, call_id=tool.id, command=command),)
    ok = tool.success if tool.success is not None else _OK_BY_STATUS.get(tool.status or "")
    events: list[ProgressEvent] = [
        ToolFinished(tool_kind=tool_kind, name=name, call_id=tool.id, ok=ok)
    ]
    if kind == "fileChange" and tool.status == "completed":
        events.extend(FileChanged(path=change.path) for change in tool.changes)
    return tuple(events)


def _item(params: object, *, started: bool, include_commands: bool) -> tuple[ProgressEvent, ...]:
    item = _ItemParams.model_validate(params).item
    return item_events(item, started=started, include_commands=include_commands)


def _delta(params: object) -> tuple[ProgressEvent, ...]:
    delta = _Delta.model_validate(params).delta
    return (AssistantText(text=delta, delta=True),) if delta else ()


def _plan(params: object) -> tuple[ProgressEvent, ...]:
    steps = _Plan.model_validate(params).plan
    return (PlanUpdated(steps=tuple(PlanStep(text=s.step, status=s.status) for s in steps)),)


_FIELDS: Final = ("inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")


def _usage(params: object, run: RunUsage | None = None) -> tuple[ProgressEvent, ...]:
    token_usage = _TokenUsageParams.model_validate(params).tokenUsage
    counts = [getattr(token_usage.total, name) for name in _FIELDS]
    if run is not None:
        counts = run.own(counts, token_usage.last)
    usage = Usage(
        input_tokens=counts[0],
        cached_input_tokens=counts[1],
        output_tokens=counts[2],
        reasoning_tokens=counts[3],
    )
    return (UsageUpdated(usage=usage),)


class RunUsage:
    """One run's share of its thread's cumulative usage (see the module docstring)."""

    __slots__ = ("_before",)

    def __init__(self) -> None:
        self._before: list[int] | None = None

    def own(self, total: list[int], last: _Breakdown | None) -> list[int]:
        """``total`` less what the thread had used before this run's turn."""
        if self._before is None:
            if last is None:  # no breakdown of the latest response: count the whole total
                self._before = [0] * len(_FIELDS)
            else:
                latest = [getattr(last, name) for name in _FIELDS]
                self._before = [max(t - x, 0) for t, x in zip(total, latest, strict=True)]
        return [max(t - b, 0) for t, b in zip(total, self._before, strict=True)]


def progress_events(
    method: str, params: object, *, include_commands: bool, usage: RunUsage | None = None
) -> tuple[ProgressEvent, ...]:
    """The progress a turn-scoped notification of the run's turn states (maybe none).

    ``usage`` makes token counts the run's own share of the thread's total. Never
    raises: a notification with a malformed consumed field yields nothing.
    """
    mappers: dict[str, Callable[[object], tuple[ProgressEvent, ...]]] = {
        "item/started": lambda p: _item(p, started=True, include_commands=include_commands),
        "item/completed": lambda p: _item(p, started=False, include_commands=include_commands),
        "item/agentMessage/delta": _delta,
        "turn/plan/updated": _plan,
        "thread/tokenUsage/updated": lambda p: _usage(p, usage),
    }
    mapper = mappers.get(method)
    if mapper is None:
        return ()
    try:
        return mapper(params)
    except ValidationError:
        _log.debug("dsh_subagent_codex: a %s notification had an unexpected shape", method)
        return ()
