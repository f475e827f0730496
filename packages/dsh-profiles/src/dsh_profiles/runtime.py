"""A composition brought to life: the service with every instance registered, and the Jobs.

:func:`open_runtime` enters a :class:`~dsh_subagent.SubagentService` and a
:class:`~dsh_tool_jobs.JobRegistry`, registers every loaded provider in profile order and
leaves both on exit (the registry first, so background runs are cancelled and disposed
before the service closes). Registering starts nothing; a product process exists only
while a delegation runs. An instance isolated by dsh-worktree is entered around the
service, so a warm worktree pool (its ``warm`` setting) lives as long as the runtime and
is removed after the service has collected every run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from dsh_subagent import (
    CancelSignal,
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    is_utf8_text,
)
from dsh_subagent.tool import ModelTool, SubagentTool, SubagentToolConfig
from dsh_tool_jobs import JobRegistry, NoticeSink
from dsh_tool_jobs.background import BackgroundSubagentLauncher
from dsh_tool_jobs.tools import job_tools
from dsh_worktree import WorktreeProvider
from pydantic import JsonValue

from dsh_profiles.errors import UsageError
from dsh_profiles.loader import Composition

__all__ = ["Runtime", "delegate", "open_runtime", "tool_schema", "validate_task", "validate_utf8"]


@dataclass(frozen=True)
class Runtime:
    """Live objects of one composition.

    Attributes:
        tools: Every model-visible tool by name, in profile order, job controls last.
    """

    composition: Composition
    service: SubagentService
    jobs: JobRegistry
    tools: dict[str, ModelTool]

    def schemas(self) -> list[dict[str, JsonValue]]:
        """The model-visible schema of every tool, in order."""
        return [tool_schema(tool) for tool in self.tools.values()]


def tool_schema(tool: ModelTool) -> dict[str, JsonValue]:
    """``{"name", "description", "parameters"}``: what a model API is given for a tool."""
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}


@asynccontextmanager
async def open_runtime(
    composition: Composition, *, notice_sink: NoticeSink | None = None
) -> AsyncIterator[Runtime]:
    """Enter the service and the job registry, register every instance, bind every tool.

    Product tools are ``max_depth = "provider-managed"`` (out-of-process providers
    cannot enforce a depth cap); ``background_mode = "disabled"`` drops
    ``run_in_background``.

    Args:
        composition: What the profile composes.
        notice_sink: Receives ``(owner, text)`` when a background Job settles before the
            model has seen its end (the registry's completion notices); without it no
            notice is sent.
    """
    async with AsyncExitStack() as pools:
        for loaded in composition.providers:
            if isinstance(loaded.provider, WorktreeProvider):
                await pools.enter_async_context(loaded.provider)
        async with _service(composition, notice_sink) as runtime:
            yield runtime


@asynccontextmanager
async def _service(
    composition: Composition, notice_sink: NoticeSink | None
) -> AsyncIterator[Runtime]:
    async with SubagentService() as service:
        for loaded in composition.providers:
            service.register_provider(loaded.provider)
        registry = JobRegistry(
            max_concurrent_jobs_per_owner=composition.jobs_config.max_concurrent_jobs_per_owner,
            notice_sink=notice_sink,
        )
        async with registry:
            launcher = (
                BackgroundSubagentLauncher(registry, service) if composition.job_tools else None
            )
            tools: dict[str, ModelTool] = {}
            for row in composition.tools:
                config = SubagentToolConfig(
                    tool_name=row.name,
                    provider=composition.instance_for(row.name),
                    enable_run_in_background=row.background_mode == "one-shot",
                    max_depth="provider-managed",
                    output_schema=row.output_schema,
                )
                tools[row.name] = SubagentTool(service, config, launcher)
            if composition.job_tools:
                for tool in job_tools(registry, composition.jobs_config):
                    tools[tool.name] = tool
            yield Runtime(composition, service, registry, tools)


def validate_task(task: str) -> str:
    """The task text unchanged, or :class:`UsageError` when it is blank or not UTF-8.

    Raises:
        UsageError: the task is empty or whitespace only, or holds an undecodable byte
            (a lone surrogate), which no product can read; the text is never repeated.
    """
    if not task.strip():
        raise UsageError("the task is blank: give the subagent a complete, self-contained task")
    validate_utf8("the task", task)
    return task


def validate_utf8(what: str, value: str) -> str:
    """``value`` unchanged, or :class:`UsageError` naming ``what`` when UTF-8 cannot encode it.

    The service refuses the same text at start (``dsh_subagent.check_request_text``); the
    command refuses it first, so the message names the argument and the exit is 2.
    """
    if not is_utf8_text(value):
        raise UsageError(
            f"{what} is not valid UTF-8 text (it holds an undecodable byte); "
            "a product cannot read it, so nothing was started"
        )
    return value


async def delegate(
    runtime: Runtime,
    provider_name: str,
    task: str,
    *,
    parent: ParentContext,
    cancel: CancelSignal,
    label: str | None = None,
) -> SubagentResult:
    """Run one foreground delegation on ``provider_name`` and dispose it.

    The result is returned only after ``dispose()`` finished, i.e. after the run's whole
    process tree has exited.

    Raises:
        SubagentError: the run could not start (nothing was published).
    """
    request = SubagentStartRequest(
        prompt=(TextBlock(text=validate_task(task)),), parent=parent, cancel=cancel, label=label
    )
    run = await runtime.service.start(provider_name, request)
    try:
        return await run.result()
    finally:
        await run.dispose()
