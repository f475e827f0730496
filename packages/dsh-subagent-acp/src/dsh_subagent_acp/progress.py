"""What an ACP agent says during its turn, as dsh-subagent's progress events.

The agent's ``session/update`` notifications of the run's session (already validated by
the ``acp`` library) and the ``usage`` of its ``session/prompt`` answer become:

* ``agent_message_chunk`` (text) → a streamed :class:`~dsh_subagent.AssistantText`;
* ``tool_call`` → :class:`~dsh_subagent.ToolStarted`; ``tool_call_update`` (or a
  ``tool_call``) with status ``completed`` / ``failed`` → :class:`~dsh_subagent.ToolFinished`,
  and for a completed one, one :class:`~dsh_subagent.FileChanged` per ``diff`` path;
* ``plan`` and an item ``plan_update`` → :class:`~dsh_subagent.PlanUpdated`;
* the prompt answer's ``usage`` → :class:`~dsh_subagent.UsageUpdated` (tokens as stated);
  a ``usage_update`` carrying a cost in USD → the cost so far.

ACP has no tool name: a tool call's ``title`` is display text that often holds the
command or a path, so the name is the call's ACP ``kind`` and the title is reported only
as the command of an ``execute`` call, only when the host opted in. The table of calls
still open (to pair a finish with its start) is bounded.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanUpdate,
    FileEditToolCallContent,
    PlanEntry,
    PlanUpdateItems,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
)
from acp.schema import Usage as AcpUsage
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

__all__ = ["MAX_OPEN_TOOL_CALLS", "TOOL_KINDS", "AcpProgress", "usage_of"]

MAX_OPEN_TOOL_CALLS: Final = 256
"""Tool calls remembered between their start and their finish (the oldest forgotten)."""

TOOL_KINDS: Final[dict[str, str]] = {
    "execute": "command",
    "edit": "file-edit",
    "delete": "file-edit",
    "move": "file-edit",
    "read": "file-read",
    "search": "search",
    "fetch": "web",
    "think": "other",
    "switch_mode": "other",
    "other": "other",
}
"""ACP ``ToolKind`` → the provider-neutral tool kind (a call without a kind is ``other``)."""

_FINISHED: Final = {"completed": True, "failed": False}


@dataclass
class _OpenCall:
    kind: str | None
    paths: tuple[str, ...]


def _diff_paths(content: Sequence[object] | None) -> tuple[str, ...]:
    paths = [c.path for c in content or () if isinstance(c, FileEditToolCallContent)]
    return tuple(dict.fromkeys(paths))  # each path once, in order


def _steps(entries: Sequence[PlanEntry]) -> tuple[PlanStep, ...]:
    return tuple(PlanStep(text=entry.content, status=entry.status) for entry in entries)


def usage_of(usage: AcpUsage, cost_usd: float | None = None) -> Usage:
    """Our :class:`~dsh_subagent.Usage` from an ACP ``Usage``, each count as stated."""
    return Usage(
        input_tokens=usage.input_tokens,
        cached_input_tokens=usage.cached_read_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=usage.thought_tokens,
        cost_usd=cost_usd,
    )


class AcpProgress:
    """Turns one session's updates into progress events, handed to ``report``.

    Args:
        report: Where each event goes (the run's ``child.report``).
        include_commands: Whether the host opted in to command text.
    """

    def __init__(self, report: Callable[[ProgressEvent], None], *, include_commands: bool) -> None:
        self._report = report
        self._include_commands = include_commands
        self._open: collections.OrderedDict[str, _OpenCall] = collections.OrderedDict()
        self._cost_usd: float | None = None
        self.usage: Usage | None = None
        """The latest usage reported (tokens from the prompt answer, cost from updates)."""

    def on_update(self, update: object) -> None:
        """Report what one ``session/update`` of the run's session says (maybe nothing)."""
        if isinstance(update, AgentMessageChunk):
            if isinstance(update.content, TextContentBlock) and update.content.text:
                self._report(AssistantText(text=update.content.text, delta=True))
        elif isinstance(update, ToolCallStart):
            self._on_start(update)
        elif isinstance(update, ToolCallProgress):
            self._on_progress(update)
        elif isinstance(update, AgentPlanUpdate):
            self._report(PlanUpdated(steps=_steps(update.entries)))
        elif isinstance(update, AgentPlanContentUpdate):
            if isinstance(update.plan, PlanUpdateItems):  # file and markdown plans have no steps
                self._report(PlanUpdated(steps=_steps(update.plan.entries)))
        elif isinstance(update, UsageUpdate):
            cost = update.cost
            if (
                cost is not None
                and cost.currency.upper() == "USD"
                and math.isfinite(cost.amount)
                and cost.amount >= 0
            ):
                self._cost_usd = cost.amount
                base = self.usage or Usage()
                self._set_usage(base.model_copy(update={"cost_usd": cost.amount}))
        # Thoughts, user message echoes, available commands, modes, … are no progress.

    def on_prompt_usage(self, usage: AcpUsage | None) -> None:
        """Report the token usage the ``session/prompt`` answer stated, if any."""
        if usage is not None:
            self._set_usage(usage_of(usage, self._cost_usd))

    def _set_usage(self, usage: Usage) -> None:
        self.usage = usage
        self._report(UsageUpdated(usage=usage))

    def _remember(self, call_id: str, call: _OpenCall) -> None:
        self._open[call_id] = call
        self._open.move_to_end(call_id)
        while len(self._open) > MAX_OPEN_TOOL_CALLS:
            self._open.popitem(last=False)

    def _on_start(self, update: ToolCallStart) -> None:
        kind = update.kind
        tool_kind = TOOL_KINDS.get(kind or "other", "other")
        command = update.title if self._include_commands and tool_kind == "command" else None
        self._report(
            ToolStarted(
                tool_kind=tool_kind,
                name=kind or "other",
                call_id=update.tool_call_id,
                command=command,
            )
        )
        call = _OpenCall(kind, _diff_paths(update.content))
        if update.status in _FINISHED:
            self._finish(update.tool_call_id, call, update.status)
        else:
            self._remember(update.tool_call_id, call)

    def _on_progress(self, update: ToolCallProgress) -> None:
        call = self._open.get(update.tool_call_id) or _OpenCall(None, ())
        if update.kind is not None:
            call.kind = update.kind
        paths = _diff_paths(update.content)
        if paths:
            call.paths = paths
        if update.status in _FINISHED:
            self._open.pop(update.tool_call_id, None)
            self._finish(update.tool_call_id, call, update.status)
        elif update.tool_call_id in self._open:
            self._open[update.tool_call_id] = call

    def _finish(self, call_id: str, call: _OpenCall, status: str) -> None:
        ok = _FINISHED[status]
        self._report(
            ToolFinished(
                tool_kind=TOOL_KINDS.get(call.kind or "other", "other"),
                name=call.kind or "other",
                call_id=call_id,
                ok=ok,
            )
        )
        if ok:
            for path in call.paths:
                self._report(FileChanged(path=path))
