"""The small model-tool protocol shared by the subagent tool and the Jobs tools.

A tool reports failure as a :class:`ToolResult` with ``is_error=True`` whose text is
``"Error: " + message``. :func:`run_tool_call` is the dispatcher harnesses use: it refuses
a call whose cancel signal is already aborted (the tool is never entered) and renders any
exception a tool lets escape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from pydantic import JsonValue

from dsh_subagent.cancel import CancelSignal
from dsh_subagent.errors import SubagentError
from dsh_subagent.events import render_error
from dsh_subagent.types import ParentContext

if TYPE_CHECKING:
    from dsh_subagent.service import PublishedRun

__all__ = [
    "ABORTED_BEFORE_DISPATCH",
    "ModelTool",
    "ToolCallContext",
    "ToolError",
    "ToolResult",
    "error_message",
    "run_tool_call",
    "tool_error",
]

ABORTED_BEFORE_DISPATCH: Final = "tool call aborted before dispatch"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the model sees for one tool call."""

    text: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """Per-call context handed to a tool.

    Attributes:
        parent: The calling agent (its session id and cwd); ``None`` when the harness
            has no calling agent.
        cancel: The tool call's cancellation signal; for a foreground delegation it is
            the provider's cancellation channel.
        on_run: Told the published run of a foreground delegation as soon as it has
            started, before the call waits for it: a harness reads the run's live
            ``progress`` there, and its :class:`~dsh_subagent.SubagentResult` (usage
            included) once the call returned. Called at most once per call, never for a
            background start or a tool that starts no run; a raising ``on_run`` is
            logged and the call goes on.
    """

    parent: ParentContext | None
    cancel: CancelSignal
    on_run: Callable[[PublishedRun], None] | None = None


class ToolError(Exception):
    """A tool failure whose message is shown to the model as ``Error: <message>``."""


@runtime_checkable
class ModelTool(Protocol):
    """A model-facing tool."""

    @property
    def name(self) -> str:
        """Tool name as the model calls it."""
        ...

    @property
    def description(self) -> str:
        """Model-visible description."""
        ...

    @property
    def parameters(self) -> dict[str, JsonValue]:
        """JSON Schema of the arguments (an object schema)."""
        ...

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        """Run the tool; failures come back as ``is_error`` results."""
        ...


def error_message(error: BaseException) -> str:
    """The model-visible message of an exception.

    Errors of this package (:class:`ToolError`, :class:`SubagentError`) carry fixed,
    safe messages and are shown as is; anything else as ``<Type>: <message>``.
    """
    if isinstance(error, ToolError | SubagentError):
        return str(error)
    return render_error(error)


def tool_error(message: str) -> ToolResult:
    """``ToolResult("Error: " + message, is_error=True)``."""
    return ToolResult(f"Error: {message}", is_error=True)


async def run_tool_call(
    tool: ModelTool, arguments: Mapping[str, object], context: ToolCallContext
) -> ToolResult:
    """Dispatch one call: refuse a pre-aborted call, render escaping exceptions."""
    if context.cancel.aborted:
        return tool_error(ABORTED_BEFORE_DISPATCH)
    try:
        return await tool.call(arguments, context)
    except Exception as exc:
        return tool_error(error_message(exc))
