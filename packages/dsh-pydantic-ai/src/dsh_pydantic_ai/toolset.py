"""A pydantic-ai toolset over dsh model tools (the subagent tools and the Job controls).

The toolset lists each :class:`~dsh_subagent.ModelTool` under its own name, description
and JSON schema, unchanged (what ``dsh tools`` prints), and runs calls through a
:class:`~dsh_subagent.ToolCallRunner`: the parent comes from the run's ``deps``
(:func:`~dsh_subagent.parent_of`), a cancelled run cancels the delegation and the call
returns only after the run's process tree is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dsh_subagent import ModelTool, PublishedRun, ToolCallRunner, parent_of, typed_answer
from pydantic import JsonValue
from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

__all__ = ["SubagentToolset"]

# Arguments are checked by each tool, which reports a bad one as its own `Error: ...`
# text (the text the model sees from the Python tool); pydantic-ai only parses the JSON.
_OBJECT_ARGUMENTS = SchemaValidator(
    core_schema.dict_schema(
        keys_schema=core_schema.str_schema(), values_schema=core_schema.any_schema()
    )
)


class SubagentToolset(AbstractToolset[AgentDepsT]):
    """The given dsh tools as one pydantic-ai toolset.

    Args:
        tools: Model tools, e.g. ``runtime.tools.values()`` of
            :func:`dsh_profiles.open_runtime` or :class:`~dsh_subagent.SubagentTool`
            instances plus ``dsh_tool_jobs.job_tools(registry)``.
        id: The toolset id (needed only by durable execution).
        max_retries: How often the model may resend a call whose arguments are not a
            JSON object before the run fails.

    Raises:
        ValueError: two tools share a name.

    A successful call returns the tool's text (a typed tool's: the validated object). A
    failed one raises
    :class:`pydantic_ai.exceptions.ToolFailed` with the tool's exact ``Error: ...``
    text, so the model gets it as a failed tool result without a retry prompt.
    """

    def __init__(
        self, tools: Iterable[ModelTool], *, id: str | None = None, max_retries: int = 1
    ) -> None:
        self._tools: dict[str, ModelTool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"SubagentToolset: duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool
        self._id = id
        self._max_retries = max_retries
        self._runner = ToolCallRunner()

    @property
    def id(self) -> str | None:
        """The toolset id given at construction."""
        return self._id

    @property
    def model_tools(self) -> Mapping[str, ModelTool]:
        """The dsh tools by name, in the order given."""
        return dict(self._tools)

    @property
    def in_flight(self) -> int:
        """Tool calls still running (a cancelled one until its teardown ended)."""
        return self._runner.in_flight

    async def wait_idle(self) -> None:
        """Return once no tool call of this toolset is running."""
        await self._runner.wait_idle()

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        """One tool per dsh tool; descriptions are read afresh for every step."""
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=name,
                    description=tool.description,
                    parameters_json_schema=tool.parameters,
                    # Strict mode may rewrite a schema; the model gets the dsh schema as is.
                    strict=False,
                ),
                max_retries=self._max_retries,
                args_validator=_OBJECT_ARGUMENTS,
            )
            for name, tool in self._tools.items()
        }

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[AgentDepsT],
        tool: ToolsetTool[AgentDepsT],
    ) -> str | JsonValue:
        """Run the dsh tool with the parent named by ``ctx.deps``.

        A typed subagent tool (a profile row with ``output_schema``) that completed returns
        the validated object (JSON data, which pydantic-ai hands the model as JSON); every
        other call returns the tool's text.

        Raises:
            ToolFailed: the tool reported an error (message: its ``Error: ...`` text).
            TypeError: ``ctx.deps.subagent_parent`` is not a ``ParentContext``.
        """
        runs: list[PublishedRun] = []
        dsh_tool = self._tools[name]
        result = await self._runner.call(dsh_tool, tool_args, parent_of(ctx.deps), runs.append)
        if result.is_error:
            raise ToolFailed(result.text)
        typed = await typed_answer(dsh_tool, runs)
        return result.text if typed is None else typed
