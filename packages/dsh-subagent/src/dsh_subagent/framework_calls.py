"""Model-tool calls hosted by an agent framework (pydantic-ai, the OpenAI Agents SDK, ...).

A framework cancels a tool call by cancelling the task that runs it, and names the
calling agent through its own run dependencies or run context. The adapters bridge both
to the tool protocol here, once:

* :func:`parent_of` reads the :class:`~dsh_subagent.ParentContext` from whatever the
  framework hands a tool (a ``ParentContext`` itself, or an object implementing
  :class:`ParentSource`);
* :class:`ToolCallRunner` dispatches a call through :func:`~dsh_subagent.run_tool_call`
  under a call-owned cancel signal. When the calling task is cancelled, the signal
  aborts (a foreground delegation settles ``aborted`` and is disposed) and the call
  still waits, shielded, until the tool returned, that is until the run's whole process
  tree is gone, before the cancellation propagates. :meth:`ToolCallRunner.wait_idle`
  waits for calls a framework stopped waiting for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Protocol, runtime_checkable

import anyio
import anyio.lowlevel
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from dsh_subagent.cancel import CancelController
from dsh_subagent.service import PublishedRun
from dsh_subagent.tool_protocol import ModelTool, ToolCallContext, ToolResult, run_tool_call
from dsh_subagent.types import ParentContext

__all__ = [
    "FRAMEWORK_CANCEL_REASON",
    "ParentSource",
    "ToolCallRunner",
    "parent_of",
    "typed_answer",
]

FRAMEWORK_CANCEL_REASON: Final = "the agent framework cancelled the tool call"
"""The cancel reason a :class:`ToolCallRunner` gives when the calling task is cancelled."""


@runtime_checkable
class ParentSource(Protocol):
    """Run dependencies or a run context that name the calling agent.

    Implement it on the object you hand the framework (pydantic-ai's ``deps``, the
    Agents SDK's ``context``); passing a :class:`~dsh_subagent.ParentContext` itself
    works too. Return the same object on every call of one session: Jobs admit and clean
    up by the parent object's identity.
    """

    @property
    def subagent_parent(self) -> ParentContext:
        """The calling agent's session id and workspace directory."""
        ...


def parent_of(source: object) -> ParentContext | None:
    """The calling agent named by ``source``, or ``None`` when it names none.

    ``source`` is a :class:`~dsh_subagent.ParentContext` (returned as is) or a
    :class:`ParentSource`; anything else (``None`` included) gives ``None``, and the
    subagent tool then answers ``Error: subagent tool requires a calling agent``.

    Raises:
        TypeError: ``source.subagent_parent`` is not a ``ParentContext``.
    """
    if isinstance(source, ParentContext):
        return source
    if isinstance(source, ParentSource):
        parent = source.subagent_parent
        if not isinstance(parent, ParentContext):
            raise TypeError(
                f"{type(source).__name__}.subagent_parent must be a dsh_subagent.ParentContext, "
                f"got {type(parent).__name__}"
            )
        return parent
    return None


class ToolCallRunner:
    """Runs model-tool calls for a framework that cancels tool calls as tasks.

    One runner serves any number of concurrent calls; it keeps no per-call state
    beyond the count of calls still in flight.
    """

    def __init__(self) -> None:
        self._in_flight = 0
        self._idle: anyio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Calls entered and not yet returned (a cancelled one counts until its teardown ended)."""
        return self._in_flight

    async def call(
        self,
        tool: ModelTool,
        arguments: Mapping[str, object],
        parent: ParentContext | None,
        on_run: Callable[[PublishedRun], None] | None = None,
    ) -> ToolResult:
        """Run one call; every failure is an ``Error: ...`` result.

        A cancellation of the calling task aborts the call's cancel signal with
        :data:`FRAMEWORK_CANCEL_REASON`, waits until the tool returned (for a foreground
        delegation: until ``dispose()`` finished) and then propagates. A background
        launch is not affected: its Job owns its own signal once the id is returned.
        ``on_run`` is the tool call's hook (see :class:`ToolCallContext`): an adapter
        reads a typed tool's validated answer from the run it is told.
        """
        # A call whose task is already cancelled never enters the tool.
        await anyio.lowlevel.checkpoint_if_cancelled()
        controller = CancelController()
        context = ToolCallContext(parent=parent, cancel=controller.signal, on_run=on_run)
        outcome: list[ToolResult] = []
        finished = anyio.Event()

        async def dispatch() -> None:
            # Shielded: only the call's own signal stops it, so the tool always gets to
            # dispose what it started before this call returns or propagates.
            with anyio.CancelScope(shield=True):
                try:
                    outcome.append(await run_tool_call(tool, arguments, context))
                finally:
                    finished.set()

        self._in_flight += 1
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(dispatch)
                try:
                    await finished.wait()
                except anyio.get_cancelled_exc_class():
                    controller.cancel(FRAMEWORK_CANCEL_REASON)
                    raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._idle is not None:
                self._idle.set()
                self._idle = None
        return outcome[0]

    async def wait_idle(self) -> None:
        """Return once no call is in flight.

        Some frameworks stop waiting for a cancelled tool call after a grace period; the
        call still finishes its teardown in its own task. Await this before you report
        that the work is gone.
        """
        while self._in_flight:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()


async def typed_answer(tool: ModelTool, runs: list[PublishedRun]) -> JsonValue | None:
    """The validated answer of a typed subagent tool's foreground call, else ``None``.

    ``runs`` is what the call's ``on_run`` hook collected. ``None`` for a tool without an
    ``output_schema``, a call that started no run (a background Job, a refusal) or a run
    that did not complete; the result is already settled (the call returned).
    """
    schema = getattr(getattr(tool, "config", None), "output_schema", None)
    if schema is None or not runs:
        return None
    result = await runs[0].result()
    if result.structured is None:
        return None
    return to_jsonable_python(result.structured)  # type: ignore[no-any-return]
