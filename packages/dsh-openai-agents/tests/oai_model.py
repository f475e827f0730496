"""A scripted Agents SDK model for the adapter tests (module name unique on sys.path).

It is the SDK's own ``agents.testing.ScriptedModel``: a ``Model`` implementation whose
steps the test writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agents import RunConfig
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

__all__ = ["CLAUDE_ANSWER", "NO_TRACING", "lead_model", "tool_outputs"]

CLAUDE_ANSWER = "AGENTS_SDK_CLAUDE_CODE_SENTINEL"
"""What the loopback Messages model answers Claude Code by default in these tests."""

NO_TRACING = RunConfig(tracing_disabled=True)
"""Every run in these tests: no trace is even recorded."""

Call = tuple[str, Mapping[str, object]]


def tool_outputs(items: Iterable[Any]) -> list[tuple[str, str]]:
    """``(tool name, output)`` of every tool result in a model input, in order."""
    names: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call":
            names[str(item["call_id"])] = str(item["name"])
        elif item.get("type") == "function_call_output":
            found.append((names.get(str(item["call_id"]), "?"), str(item["output"])))
    return found


def _report(call: ModelCall) -> list[Any]:
    outputs = tool_outputs(call.input) if isinstance(call.input, list) else []
    return [assistant_message("\n".join(output for _, output in outputs) or "done")]


def lead_model(*steps: Sequence[Call]) -> ScriptedModel:
    """Step N answers model call N with its tool calls; then every tool result, a line each."""
    script: list[Any] = [
        [
            function_call(name, dict(arguments), call_id=f"call-{index}-{position}")
            for position, (name, arguments) in enumerate(step)
        ]
        for index, step in enumerate(steps)
    ]
    script.append(ModelStep.respond(_report))
    return ScriptedModel(script)
