"""The job controls as :class:`~dsh_subagent.tool.ModelTool` objects.

A thin adapter: ``dsh_tool_jobs.controls`` owns every behaviour and message; this module
only gives each control a name, description and schema and turns its reply into a
:class:`~dsh_subagent.tool.ToolResult`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dsh_subagent.tool import ModelTool, ToolCallContext, ToolResult
from dsh_tool_jobs import JobRegistry
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
from pydantic import JsonValue

__all__ = ["job_tools"]


@dataclass(frozen=True)
class _JobTool:
    name: str
    description: str
    parameters: dict[str, JsonValue]
    registry: JobRegistry
    config: JobsToolsConfig

    async def call(self, arguments: Mapping[str, object], context: ToolCallContext) -> ToolResult:
        reply: ControlReply
        if self.name == "job_output":
            reply = await job_output(
                self.registry, self.config, arguments, context.parent, context.cancel
            )
        elif self.name == "job_list":
            reply = job_list(self.registry, arguments, context.parent)
        else:
            reply = job_kill(self.registry, arguments, context.parent)
        return ToolResult(reply.text, is_error=reply.is_error)


def job_tools(registry: JobRegistry, config: JobsToolsConfig) -> tuple[ModelTool, ...]:
    """``job_output``, ``job_list`` and ``job_kill`` bound to ``registry``."""
    return (
        _JobTool("job_output", JOB_OUTPUT_DESCRIPTION, dict(JOB_OUTPUT_SCHEMA), registry, config),
        _JobTool("job_list", JOB_LIST_DESCRIPTION, dict(JOB_LIST_SCHEMA), registry, config),
        _JobTool("job_kill", JOB_KILL_DESCRIPTION, dict(JOB_KILL_SCHEMA), registry, config),
    )
