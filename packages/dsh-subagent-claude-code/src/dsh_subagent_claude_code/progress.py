"""Claude Code's messages as the run's progress events and usage (see the package README).

Only what the product said is reported, message by message, nothing synthesised:

* ``system``/``init`` → :class:`~dsh_subagent.TurnStarted`;
* an assistant ``text`` block → :class:`~dsh_subagent.AssistantText` (complete; a
  ``text_delta`` stream event → a ``delta``, only if partial messages are switched on);
* a ``tool_use`` block (or a server tool use) → :class:`~dsh_subagent.ToolStarted`, with
  the ``Bash`` command text only when the host opted in;
* its ``tool_result`` → :class:`~dsh_subagent.ToolFinished` (``ok`` unless
  ``is_error``); a successful file edit also → :class:`~dsh_subagent.FileChanged`, a
  successful plan tool (``TodoWrite``, ``TaskCreate``/``TaskUpdate``/``TaskList``) →
  :class:`~dsh_subagent.PlanUpdated` with the whole plan as the product stated it;
* the result message → :class:`~dsh_subagent.UsageUpdated` with the query's totals.

Every table kept here (open tool calls, plan steps) is bounded: the product feeds them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from claude_agent_sdk import (
    AssistantMessage,
    Message,
    ResultMessage,
    ServerToolResultBlock,
    ServerToolUseBlock,
    StreamEvent,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)

__all__ = [
    "MAX_OPEN_TOOL_CALLS",
    "MAX_PLAN_STEPS",
    "TOOL_KINDS",
    "ClaudeProgress",
    "tool_kind",
    "usage_of",
]

_log = logging.getLogger("dsh_subagent_claude_code")

TOOL_KINDS: Final[Mapping[str, str]] = {
    "Bash": "command",
    "BashOutput": "command",
    "KillShell": "command",
    "Edit": "file-edit",
    "MultiEdit": "file-edit",
    "Write": "file-edit",
    "NotebookEdit": "file-edit",
    "Read": "file-read",
    "NotebookRead": "file-read",
    "Glob": "search",
    "Grep": "search",
    "LS": "search",
    "WebFetch": "web",
    "WebSearch": "web",
    "web_fetch": "web",
    "web_search": "web",
    "Agent": "agent",
    "Task": "agent",
}
"""Claude Code tool name → provider-neutral tool kind; ``mcp__*`` is ``mcp``, the rest
``other``."""

_EDITED_PATH_KEYS: Final[Mapping[str, str]] = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}

_PLAN_TOOLS: Final = frozenset({"TodoWrite", "TaskCreate", "TaskUpdate", "TaskList"})

MAX_OPEN_TOOL_CALLS: Final = 256
"""Tool calls remembered until their result (the oldest is forgotten beyond it)."""

MAX_PLAN_STEPS: Final = 256
"""Plan steps kept; steps beyond it are not reported."""


def tool_kind(name: str) -> str:
    """The provider-neutral kind of a Claude Code tool."""
    if name.startswith("mcp__"):
        return "mcp"
    return TOOL_KINDS.get(name, "other")


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    kind: str
    input: Mapping[str, Any]


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _sum(values: list[int | None]) -> int | None:
    if not values or any(value is None for value in values):
        return None
    return sum(value for value in values if value is not None)


def _input_total(fresh: int | None, read: int | None, created: int | None) -> int | None:
    # The API counts cached prompt tokens apart from input_tokens; Usage counts them in.
    if fresh is None:
        return None
    return fresh + (read or 0) + (created or 0)


def usage_of(message: ResultMessage, *, resumed: bool = False) -> Usage | None:
    """The query's usage from the result message; ``None`` when it states none.

    On a ``resumed`` session the CLI's ``model_usage`` and ``total_cost_usd`` are the
    session's running totals (earlier delegations included), so a follow-up run reports
    the query's own ``usage`` tokens and no cost.

    The per-model totals (``model_usage``) are preferred, summed over models: they are
    what ``total_cost_usd`` is computed from, and the CLI fills them on every result,
    while the ``usage`` of an error result may be all zeros. ``usage`` is the fallback.
    Input counts fresh, cache-read and cache-creation tokens; cached input is the cache
    reads; reasoning is the thinking tokens the product broke out, if it did.
    """
    cost = message.total_cost_usd
    cost_usd = (
        float(cost)
        if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost)
        else None
    )
    if (cost_usd is not None and cost_usd < 0) or resumed:
        cost_usd = None
    per_model = None if resumed else message.model_usage
    entries = (
        [entry for entry in per_model.values() if isinstance(entry, Mapping)]
        if isinstance(per_model, Mapping)
        else []
    )
    if entries:
        read = _sum([_count(entry.get("cacheReadInputTokens")) for entry in entries])
        created = _sum([_count(entry.get("cacheCreationInputTokens")) for entry in entries])
        fresh = _sum([_count(entry.get("inputTokens")) for entry in entries])
        output = _sum([_count(entry.get("outputTokens")) for entry in entries])
        reasoning = _sum([_count(entry.get("thinkingTokens")) for entry in entries])
    elif isinstance(message.usage, Mapping):
        usage = message.usage
        read = _count(usage.get("cache_read_input_tokens"))
        created = _count(usage.get("cache_creation_input_tokens"))
        fresh = _count(usage.get("input_tokens"))
        output = _count(usage.get("output_tokens"))
        details = usage.get("output_tokens_details")
        reasoning = _count(details.get("thinking_tokens")) if isinstance(details, Mapping) else None
    else:
        read = created = fresh = output = reasoning = None
    result = Usage(
        input_tokens=_input_total(fresh, read, created),
        cached_input_tokens=read,
        output_tokens=output,
        reasoning_tokens=reasoning,
        cost_usd=cost_usd,
    )
    return None if result == Usage() else result


def _steps_from_todos(todos: Any) -> list[PlanStep] | None:
    if not isinstance(todos, list):
        return None
    steps = []
    for todo in todos[:MAX_PLAN_STEPS]:
        if isinstance(todo, Mapping) and isinstance(todo.get("content"), str):
            status = todo.get("status")
            steps.append(
                PlanStep(text=todo["content"], status=status if isinstance(status, str) else None)
            )
    return steps


class ClaudeProgress:
    """Turns one run's SDK messages into progress events.

    Args:
        report: Where events go (the run's ``child.report``).
        include_commands: Whether ``Bash`` command text may be reported (host opt-in).
    """

    def __init__(
        self,
        report: Callable[[ProgressEvent], None],
        *,
        include_commands: bool,
        resumed: bool = False,
    ) -> None:
        self._report = report
        self._resumed = resumed
        self._include_commands = include_commands
        self._calls: dict[str, _Call] = {}
        self._plan: dict[str, PlanStep] = {}

    def observe(self, message: Message) -> None:
        """Report what ``message`` says; never raises (a mapping fault is logged)."""
        try:
            self._observe(message)
        except Exception:
            _log.debug("dsh_subagent_claude_code: a message was not mapped", exc_info=True)

    def _observe(self, message: Message) -> None:
        if isinstance(message, SystemMessage):
            if message.subtype == "init":
                self._report(TurnStarted())
        elif isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, TextBlock) and block.text:
                    self._report(AssistantText(text=block.text))
                elif isinstance(block, ToolUseBlock | ServerToolUseBlock):
                    self._started(block.id, block.name, block.input)
                elif isinstance(block, ServerToolResultBlock):
                    self._finished(block.tool_use_id, ok=None, structured=None)
        elif isinstance(message, UserMessage) and isinstance(message.content, list):
            results = [block for block in message.content if isinstance(block, ToolResultBlock)]
            # The structured result belongs to the message's one tool result.
            structured = message.tool_use_result if len(results) == 1 else None
            for result in results:
                # The Messages API omits is_error on success: only True is a failure.
                self._finished(
                    result.tool_use_id, ok=result.is_error is not True, structured=structured
                )
        elif isinstance(message, StreamEvent):
            event = message.event
            delta = event.get("delta") if event.get("type") == "content_block_delta" else None
            if isinstance(delta, Mapping) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str) and text:
                    self._report(AssistantText(text=text, delta=True))
        elif isinstance(message, ResultMessage):
            usage = usage_of(message, resumed=self._resumed)
            if usage is not None:
                self._report(UsageUpdated(usage=usage))

    def _started(self, call_id: str, name: str, tool_input: Any) -> None:
        arguments: Mapping[str, Any] = tool_input if isinstance(tool_input, Mapping) else {}
        kind = tool_kind(name)
        command = arguments.get("command") if kind == "command" else None
        if len(self._calls) >= MAX_OPEN_TOOL_CALLS:
            del self._calls[next(iter(self._calls))]
        self._calls[call_id] = _Call(name, kind, arguments)
        self._report(
            ToolStarted(
                tool_kind=kind,
                name=name,
                call_id=call_id,
                command=command if self._include_commands and isinstance(command, str) else None,
            )
        )

    def _finished(self, call_id: str, *, ok: bool | None, structured: Any) -> None:
        call = self._calls.pop(call_id, None)
        if call is None:
            return  # never started here (or forgotten): its name is unknown
        self._report(ToolFinished(tool_kind=call.kind, name=call.name, call_id=call_id, ok=ok))
        if not ok:
            return
        path_key = _EDITED_PATH_KEYS.get(call.name)
        path = call.input.get(path_key) if path_key is not None else None
        if isinstance(path, str) and path:
            self._report(FileChanged(path=path))
        if call.name in _PLAN_TOOLS and self._update_plan(call, structured):
            self._report(PlanUpdated(steps=tuple(self._plan.values())))

    def _update_plan(self, call: _Call, structured: Any) -> bool:
        """Apply a successful plan tool to the plan; whether the plan was stated."""
        if call.name == "TodoWrite":
            steps = _steps_from_todos(call.input.get("todos"))
            if steps is None:
                return False
            self._plan = {str(n): step for n, step in enumerate(steps)}
            return True
        if not isinstance(structured, Mapping):
            return False
        if call.name == "TaskList":
            tasks = structured.get("tasks")
            if not isinstance(tasks, list):
                return False
            self._plan = {}
            for task in tasks:
                self._put_task(task)
            return True
        if call.name == "TaskCreate":
            return self._put_task(structured.get("task"))
        # TaskUpdate: the product states the status change; the subject comes from input.
        task_id = structured.get("taskId")
        if structured.get("success") is not True or not isinstance(task_id, str):
            return False
        step = self._plan.get(task_id)
        change = structured.get("statusChange")
        status = change.get("to") if isinstance(change, Mapping) else None
        if status == "deleted":
            return self._plan.pop(task_id, None) is not None
        if step is None:
            return False
        subject = call.input.get("subject")
        self._plan[task_id] = PlanStep(
            text=subject if isinstance(subject, str) and subject else step.text,
            status=status if isinstance(status, str) else step.status,
        )
        return True

    def _put_task(self, task: Any) -> bool:
        if not isinstance(task, Mapping):
            return False
        task_id, subject = task.get("id"), task.get("subject")
        if not isinstance(task_id, str) or not isinstance(subject, str):
            return False
        if task_id not in self._plan and len(self._plan) >= MAX_PLAN_STEPS:
            return False
        status = task.get("status")  # TaskCreate's result states none
        self._plan[task_id] = PlanStep(
            text=subject, status=status if isinstance(status, str) else None
        )
        return True
