"""OpenAI Agents SDK function tools over dsh model tools (the subagent tools, the Job controls).

Each :class:`~dsh_subagent.ModelTool` becomes an ``agents.FunctionTool`` with its own
name, description and JSON schema, unchanged (what ``dsh tools`` prints; strict mode is
off because it would rewrite optional parameters). Calls run through a
:class:`~dsh_subagent.ToolCallRunner`: the parent comes from the run context
(:func:`~dsh_subagent.parent_of` of ``RunContextWrapper.context``), a cancelled run
cancels the delegation, and the call returns only after the run's process tree is gone.

The SDK stops waiting for a cancelled tool call after a short grace period while the
call still tears down in its own task; :meth:`SubagentFunctionTools.wait_idle` waits for
that teardown.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from dsh_subagent import (
    ModelTool,
    PublishedRun,
    ToolCallRunner,
    parent_of,
    tool_error,
    typed_answer,
)

__all__ = ["SubagentFunctionTools"]

INVALID_ARGUMENTS = "invalid tool arguments: expected a JSON object"
"""The error text (after ``Error: ``) for arguments that are not a JSON object."""


class SubagentFunctionTools:
    """The given dsh tools as Agents SDK function tools.

    Args:
        tools: Model tools, e.g. ``runtime.tools.values()`` of
            :func:`dsh_profiles.open_runtime` or :class:`~dsh_subagent.SubagentTool`
            instances plus ``dsh_tool_jobs.job_tools(registry)``.

    Raises:
        ValueError: two tools share a name.

    Every call returns the text the model sees from the dsh tool: the answer, or the
    ``Error: ...`` text of a failure (the SDK has no separate error flag for a string
    result). A typed subagent tool (``output_schema``) that completed returns exactly
    the validated object as JSON text.
    """

    def __init__(self, tools: Iterable[ModelTool]) -> None:
        self._tools: dict[str, ModelTool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"SubagentFunctionTools: duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool
        self._runner = ToolCallRunner()

    @property
    def model_tools(self) -> Mapping[str, ModelTool]:
        """The dsh tools by name, in the order given."""
        return dict(self._tools)

    @property
    def function_tools(self) -> list[FunctionTool]:
        """New ``FunctionTool`` objects, one per dsh tool, with the current descriptions."""
        return [
            FunctionTool(
                name=name,
                description=tool.description,
                params_json_schema=copy.deepcopy(tool.parameters),
                on_invoke_tool=self._invoker(tool),
                strict_json_schema=False,
            )
            for name, tool in self._tools.items()
        ]

    @property
    def in_flight(self) -> int:
        """Tool calls still running (a cancelled one until its teardown ended)."""
        return self._runner.in_flight

    async def wait_idle(self) -> None:
        """Return once no tool call of these tools is running."""
        await self._runner.wait_idle()

    def _invoker(self, tool: ModelTool) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(context: ToolContext[Any], raw_arguments: str) -> str:
            try:
                arguments = json.loads(raw_arguments or "{}")
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                return tool_error(INVALID_ARGUMENTS).text
            runs: list[PublishedRun] = []
            result = await self._runner.call(
                tool, arguments, parent_of(context.context), runs.append
            )
            typed = None if result.is_error else await typed_answer(tool, runs)
            # A typed tool's completed call: exactly the validated object, as JSON text.
            return result.text if typed is None else json.dumps(typed, ensure_ascii=False)

        return invoke
