"""What the MCP client gets: tool results with structured content, and progress lines.

A delegation's result keeps the Python tool's text unchanged in its ``text`` content
(the final answer, or ``Error: ...`` with the same safe headline, diagnostic and partial
output). Its structured content repeats that text next to the stop reason and the usage
the product reported, so a client that shows only structured content (Codex does) still
gives its model the answer, and a client that reads usage and cost never parses text.

Progress lines describe what the product is doing for the people watching the client;
they carry product text (assistant text, tool names, paths), so they are bounded and are
never put into a tool result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import mcp_types as types
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanUpdated,
    ProgressEvent,
    SubagentResult,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
)
from dsh_subagent.tool import ToolResult
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

__all__ = [
    "MAX_PROGRESS_MESSAGE_CHARS",
    "delegation_result",
    "describe_progress",
    "tool_result",
    "usage_json",
]

MAX_PROGRESS_MESSAGE_CHARS: Final = 300
"""Progress messages are cut to this many characters (product text can be long)."""


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_PROGRESS_MESSAGE_CHARS:
        return text
    return text[: MAX_PROGRESS_MESSAGE_CHARS - 1] + "…"


def _usage_line(usage: Usage) -> str:
    parts = []
    if usage.input_tokens is not None:
        parts.append(f"{usage.input_tokens} input tokens")
    if usage.output_tokens is not None:
        parts.append(f"{usage.output_tokens} output tokens")
    if usage.cost_usd is not None:
        parts.append("$" + f"{usage.cost_usd:.6f}".rstrip("0").rstrip("."))
    return "usage: " + (", ".join(parts) or "reported")


def describe_progress(event: ProgressEvent) -> str | None:
    """One bounded line for an MCP progress notification; ``None`` for a streamed delta.

    Streamed assistant-text deltas are skipped (one notification per token would flood
    the client); the complete message follows them.
    """
    if isinstance(event, TurnStarted):
        return "started working"
    if isinstance(event, AssistantText):
        return None if event.delta else _bounded(f"assistant: {event.text}")
    if isinstance(event, ToolStarted):
        what = f" {event.command}" if event.command else ""
        return _bounded(f"tool started: {event.name} ({event.tool_kind}){what}")
    if isinstance(event, ToolFinished):
        outcome = {True: "ok", False: "failed", None: "finished"}[event.ok]
        return _bounded(f"tool {outcome}: {event.name}")
    if isinstance(event, FileChanged):
        return _bounded(f"file changed: {event.path}")
    if isinstance(event, PlanUpdated):
        done = sum(1 for step in event.steps if step.status == "completed")
        return f"plan: {done}/{len(event.steps)} steps completed"
    return _usage_line(event.usage)


def usage_json(usage: Usage | None) -> JsonValue:
    """The usage as the product reported it (``None`` fields stay ``null``)."""
    if usage is None:
        return None
    data: dict[str, JsonValue] = dict(usage.model_dump(mode="json"))
    data["total_tokens"] = usage.total_tokens
    return data


def tool_result(result: ToolResult) -> types.CallToolResult:
    """A plain tool result (job controls): the text, and ``isError`` as the tool said."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.text)], is_error=result.is_error
    )


def typed_output_schema(schema: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The ``outputSchema`` of a typed tool: the structured content, with ``structured``
    (the validated answer) matching the tool's schema.

    The content keeps its other keys (``text``, ``stop_reason``, ``usage``, ``changes``,
    ``job_id``) so a call handed off to a Job still conforms; the schema's ``$defs`` move
    to the root so its ``#/$defs/...`` references still resolve.
    """
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    wrapped: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "stop_reason": {"type": "string"},
            "job_id": {"type": "string"},
            "structured": inner,
        },
        "required": ["text"],
    }
    if "$defs" in schema:
        wrapped["$defs"] = schema["$defs"]
    return wrapped


def delegation_result(
    result: ToolResult,
    *,
    settled: SubagentResult | None = None,
    job_id: str | None = None,
) -> types.CallToolResult:
    """A delegation's result: its text, plus structured ``text``, stop reason, usage,
    ``changes`` (branch, commit, base, counts of an isolated run; ``null`` otherwise) and,
    for a typed tool that completed, ``structured`` (the validated answer).

    Args:
        result: What the subagent tool returned (text unchanged).
        settled: The foreground run's result, when a run started.
        job_id: The background Job's id, when the call started one.
    """
    structured: dict[str, JsonValue] = {"text": result.text}
    if settled is not None:
        structured["stop_reason"] = settled.stop_reason
        structured["usage"] = usage_json(settled.usage)
        # An isolated run (the profile's worktree setting): where its changes went.
        structured["changes"] = (
            None if settled.changes is None else settled.changes.model_dump(mode="json")
        )
        if settled.structured is not None:  # a typed tool's validated answer
            structured["structured"] = to_jsonable_python(settled.structured)
    if job_id is not None:
        structured["job_id"] = job_id
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.text)],
        structured_content=structured,
        is_error=result.is_error,
    )
