"""``job_output`` / ``job_list`` / ``job_kill`` as :class:`dsh_subagent.tool_protocol.ModelTool`.

The caller is the tool call's ``context.parent`` (visibility by its session id); the
call's cancel signal aborts a ``job_output`` wait. Errors come back as
``Error: <message>`` results, like every other tool of the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh_subagent.tool_protocol import ModelTool, ToolCallContext, ToolResult, tool_error
from pydantic import JsonValue

from dsh_tool_jobs.config import JobsToolsConfig
from dsh_tool_jobs.controls import (
    JOB_KILL_DESCRIPTION,
    JOB_KILL_SCHEMA,
    JOB_LIST_DESCRIPTION,
    JOB_LIST_SCHEMA,
    JOB_OUTPUT_DESCRIPTION,
    JOB_OUTPUT_SCHEMA,
    ControlReply,
    job_kill,
    job_list,
    job_output,
)
from dsh_tool_jobs.registry import JobRegistry

__all__ = ["JobKillTool", "JobListTool", "JobOutputTool", "job_tools"]


def _result(reply: ControlReply) -> ToolResult:
    return tool_error(reply.text) if reply.is_error else ToolResult(reply.text)


class _JobTool:
    _name: str
    _description: str
    _schema: dict[str, JsonValue]

    def __init__(self, registry: JobRegistry, config: JobsToolsConfig | None = None) -> None:
        self._registry = registry
        self._config = config or JobsToolsConfig()

    @property
    def name(self) -> str:
        """Tool name as the model calls it."""
        return self._name

    @property
    def description(self) -> str:
        """Model-visible description (docs/api/dsh-tool-jobs.md, "Tool schemas")."""
        return self._description

    @property
    def parameters(self) -> dict[str, JsonValue]:
        """JSON Schema of the arguments."""
        return self._schema


class JobOutputTool(_JobTool):
    """``job_output``: read a job, optionally waiting (clamped) for it to finish."""

    _name = "job_output"
    _description = JOB_OUTPUT_DESCRIPTION
    _schema = JOB_OUTPUT_SCHEMA

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        """Run the control with the call's parent and cancel signal."""
        reply = await job_output(
            self._registry, self._config, arguments, context.parent, context.cancel
        )
        return _result(reply)


class JobListTool(_JobTool):
    """``job_list``: the caller's jobs and unowned jobs."""

    _name = "job_list"
    _description = JOB_LIST_DESCRIPTION
    _schema = JOB_LIST_SCHEMA

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        """Run the control for the call's parent."""
        return _result(job_list(self._registry, arguments, context.parent))


class JobKillTool(_JobTool):
    """``job_kill``: request cancellation of one job."""

    _name = "job_kill"
    _description = JOB_KILL_DESCRIPTION
    _schema = JOB_KILL_SCHEMA

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        """Run the control for the call's parent."""
        return _result(job_kill(self._registry, arguments, context.parent))


def job_tools(
    registry: JobRegistry, config: JobsToolsConfig | None = None
) -> tuple[ModelTool, ModelTool, ModelTool]:
    """The three controls bound to ``registry``: ``job_output``, ``job_list``, ``job_kill``."""
    return (
        JobOutputTool(registry, config),
        JobListTool(registry, config),
        JobKillTool(registry, config),
    )
