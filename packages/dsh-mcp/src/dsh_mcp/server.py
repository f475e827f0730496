"""The MCP tool server: exactly a profile's subagent and job tools, with dsh's guarantees.

``tools/list`` returns the tools ``dsh tools PROFILE`` prints, with the same names,
descriptions and JSON schemas (one source of truth: the live tool objects). ``tools/call``
runs the tool through :func:`~dsh_subagent.tool.run_tool_call`, so the texts are the
Python tool's own; a failed run is a result with ``isError: true``.

For every call the server owns a :class:`~dsh_subagent.CancelController`:
``notifications/cancelled``, the client leaving (stdin closed, the client killed) and a
server shutdown all cancel it, and the call's handler waits until the run has settled
``aborted`` and its whole process tree has exited before it lets go.

Per connection (one on stdio, one per MCP session over HTTP) the server keeps a parent
session id: background Jobs are visible to the connection that started them, and their
completion notices reach that connection as ``notifications/message`` log entries. When
an HTTP session ends (the client's DELETE, or, for a client gone without one, the
session's idle timeout: ``[mcp] session_idle_seconds`` with no request in flight and no
open GET stream), its running calls are cancelled and its Jobs killed: their slots are
freed once their trees are gone. (On stdio the connection's end is the server's, which
ends everything anyway.)

A foreground delegation still running after ``foreground_seconds`` continues as a
background Job of its caller and the call returns that Job's id
(:mod:`dsh_mcp.handoff`), so clients that abandon long tool calls lose nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from dsh_profiles.loader import Composition
from dsh_profiles.runtime import Runtime, open_runtime
from dsh_subagent import CancelController, ParentContext, PublishedRun, SubagentResult
from dsh_subagent.tool import ModelTool, SubagentTool, ToolCallContext, ToolResult, run_tool_call
from dsh_tool_jobs import JobError, JobSnapshot
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from pydantic import JsonValue

from dsh_mcp.handoff import CallState, hand_off, handoff_text, label_of
from dsh_mcp.results import (
    delegation_result,
    describe_progress,
    tool_result,
    typed_output_schema,
)
from dsh_mcp.settings import ServerSettings
from dsh_mcp.slots import DelegationSlots, busy_message
from dsh_mcp.workspace import WorkspaceError, client_root

__all__ = [
    "CALLS_LOGGER",
    "CLIENT_CANCELLED",
    "NOTICE_LOGGER",
    "SERVER_NAME",
    "SESSION_ENDED",
    "ToolServer",
    "open_tool_server",
]

_log = logging.getLogger("dsh_mcp")

SERVER_NAME: Final = "dsh"
NOTICE_LOGGER: Final = "dsh.jobs"
"""The ``logger`` of the log entries that carry background Job completion notices."""
CALLS_LOGGER: Final = "dsh.calls"
"""The ``logger`` of the log entry that confirms how a cancelled call ended."""
CLIENT_CANCELLED: Final = "cancelled by the MCP client"
"""The cancel reason of a call the client cancelled or left."""
SESSION_ENDED: Final = "the MCP session ended"
"""The cancel reason of the calls and Jobs of an HTTP session that ended."""

_BACKGROUND_STARTED: Final = "started background subagent job "
_NOTICE_BUFFER: Final = 256
_MAX_CONNECTIONS: Final = 256  # HTTP sessions come and go; the oldest entries are forgotten
_LEVELS: Final[tuple[types.LoggingLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
_NOTICE_LEVEL: Final[types.LoggingLevel] = "notice"
_LOG_SEND_SECONDS: Final = 1.0  # a log entry never holds up a teardown for longer
_INSTRUCTIONS: Final = (
    "Each subagent tool hands one complete, self-contained task to a separate coding agent "
    "and returns its final answer. Job tools collect or stop background delegations."
)


def _version() -> str:
    try:
        return importlib.metadata.version("dsh-mcp")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


@dataclass(eq=False)
class _Connection:
    """One MCP connection: its parent contexts (one per workspace) and log level."""

    key: str
    session: ServerSession
    parents: dict[str | None, ParentContext] = field(default_factory=dict)
    log_level: types.LoggingLevel | None = None
    live: set[CancelController] = field(default_factory=set)

    @property
    def session_id(self) -> str:
        return f"mcp-{self.key}"

    def parent(self, cwd: str | None) -> ParentContext:
        # One owner object per workspace: the Job registry admits and cleans up by
        # object identity and shows jobs by session id.
        parent = self.parents.get(cwd)
        if parent is None:
            parent = self.parents[cwd] = ParentContext(session_id=self.session_id, cwd=cwd)
        return parent

    def wants(self, level: types.LoggingLevel) -> bool:
        floor = self.log_level
        return floor is None or _LEVELS.index(level) >= _LEVELS.index(floor)


def _connection_key(ctx: ServerRequestContext[Any, Any]) -> str:
    headers = getattr(ctx.request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return f"http-{session_id}" if isinstance(session_id, str) and session_id else "stdio"


def _session_teardown(ctx: ServerRequestContext[Any, Any]) -> AsyncExitStack | None:
    """The teardown stack of the request's HTTP session (``None`` on stdio).

    The SDK unwinds a connection's ``exit_stack`` when the connection closes (a DELETE,
    the idle timeout, the transport going away) and invites handlers to push cleanup on
    it, but its low-level request context does not expose the connection yet; the
    session object holds it. A pinning test fails if an SDK upgrade moves it.
    """
    connection = getattr(ctx.session, "_connection", None)
    if getattr(connection, "session_id", None) is None:
        return None  # stdio (its end is the server's) or stateless HTTP (no session)
    stack = getattr(connection, "exit_stack", None)
    return stack if isinstance(stack, AsyncExitStack) else None


def _error(message: str) -> ToolResult:
    return ToolResult(f"Error: {message}", is_error=True)


class ToolServer:
    """The MCP handlers for one runtime (use :func:`open_tool_server`).

    Attributes:
        server: The low-level MCP server; serve it with ``server.run(read, write,
            server.create_initialization_options())`` or over HTTP.
        slots: The server-wide bound on concurrent delegations.
    """

    def __init__(
        self,
        runtime: Runtime,
        settings: ServerSettings,
        task_group: TaskGroup,
        notices: MemoryObjectSendStream[tuple[ParentContext, str]],
    ) -> None:
        self._runtime = runtime
        self._notices = notices
        self._settings = settings
        self._calls = task_group
        self._delegations = frozenset(row.name for row in runtime.composition.tools)
        self._connections: dict[str, _Connection] = {}
        self._held: dict[str, Callable[[], None]] = {}
        self._live: set[CancelController] = set()
        self._calls_changed = anyio.Event()
        self._stopping: str | None = None
        self.slots = DelegationSlots(
            settings.max_concurrent_delegations, settings.slot_wait_seconds
        )
        runtime.jobs.on_done(self._job_done)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=_version(),
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # Registered directly (not through the deprecated constructor argument): it
        # declares the logging capability that carries the Job completion notices.
        self.server.add_request_handler(
            "logging/setLevel", types.SetLevelRequestParams, self._set_level
        )

    # -- tools/list --------------------------------------------------------------------

    def tools(self) -> list[types.Tool]:
        """The served tools: name, description and input schema of every runtime tool."""
        return [
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=tool.parameters,
                output_schema=_output_schema(tool),
            )
            for tool in self._runtime.tools.values()
        ]

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._connection(ctx)
        return types.ListToolsResult(tools=self.tools())

    # -- logging/setLevel --------------------------------------------------------------

    async def _set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self._connection(ctx).log_level = params.level
        return types.EmptyResult()

    # -- connections -------------------------------------------------------------------

    def _connection(self, ctx: ServerRequestContext[Any, Any]) -> _Connection:
        key = _connection_key(ctx)
        connection = self._connections.get(key)
        if connection is None:
            while len(self._connections) >= _MAX_CONNECTIONS:
                # Only notice routing is lost: Jobs stay visible by their session id.
                del self._connections[next(iter(self._connections))]
            connection = self._connections[key] = _Connection(key, ctx.session)
            teardown = _session_teardown(ctx)
            if teardown is not None:
                teardown.callback(self._session_ended, connection)
        else:
            connection.session = ctx.session  # the latest request's view of the connection
        return connection

    def _session_ended(self, connection: _Connection) -> None:
        """The connection's session ended: cancel its calls, kill its Jobs (in the background).

        Runs as the session's teardown callback; the Jobs are disposed in the server's
        task group, which the server's stop waits for.
        """
        if self._connections.get(connection.key) is connection:
            del self._connections[connection.key]
        for controller in list(connection.live):
            controller.cancel(SESSION_ENDED)
        parents = list(connection.parents.values())
        if parents:
            # RuntimeError: the server is stopping, and the registry's exit ends them.
            with contextlib.suppress(RuntimeError):
                self._calls.start_soon(self._dispose_jobs, parents)

    async def _dispose_jobs(self, parents: list[ParentContext]) -> None:
        for parent in parents:
            try:
                await self._runtime.jobs.dispose_owner(parent)
            except Exception as exc:
                _log.warning("dsh_mcp: a session's jobs were not disposed: %s", exc)

    async def _workspace(self, ctx: ServerRequestContext[Any, Any]) -> str:
        if self._settings.workspace is not None:
            return self._settings.workspace
        return await client_root(ctx.session)

    # -- tools/call --------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = self._runtime.tools.get(params.name)
        if tool is None:
            known = ", ".join(self._runtime.tools) or "none"
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r} (tools: {known})")
        arguments: Mapping[str, object] = params.arguments or {}
        connection = self._connection(ctx)
        if tool.name not in self._delegations:
            parent = connection.parent(self._settings.workspace)
            outcome = await self._in_call_task(
                tool, arguments, parent, ctx, connection, delegation=False
            )
            return tool_result(outcome.result)
        try:
            workspace = await self._workspace(ctx)
        except WorkspaceError as exc:
            return delegation_result(_error(str(exc)))
        if not await self.slots.acquire():
            message = busy_message(self.slots.limit, self.slots.wait_seconds)
            return delegation_result(_error(message))
        parent = connection.parent(workspace)
        outcome = await self._in_call_task(
            tool, arguments, parent, ctx, connection, delegation=True
        )
        if outcome.handoff is not None:
            return delegation_result(outcome.handoff, job_id=outcome.job_id)
        return delegation_result(outcome.result, settled=outcome.settled, job_id=outcome.job_id)

    async def _in_call_task(
        self,
        tool: ModelTool,
        arguments: Mapping[str, object],
        parent: ParentContext,
        ctx: ServerRequestContext[Any, Any],
        connection: _Connection,
        *,
        delegation: bool,
    ) -> CallState:
        """Run the call in the server's task group; a cancelled handler cancels the run.

        The run lives outside the handler's cancel scope so that a cancellation reaches
        it as its own cancel signal (the run settles ``aborted`` and is disposed) and not
        as an interruption halfway through a product start; the handler still returns
        only once the call has ended, or once it became a background Job (a foreground
        delegation still running after ``foreground_seconds``).
        """
        controller = CancelController()
        outcome = CallState()
        self._live.add(controller)
        connection.live.add(controller)
        self._calls.start_soon(
            self._run_call, tool, arguments, parent, ctx, controller, outcome, delegation
        )
        handoff = (
            self._settings.foreground_seconds
            if delegation
            and self._runtime.composition.job_tools
            and arguments.get("run_in_background") is not True
            else None
        )
        try:
            if handoff is not None:
                with anyio.move_on_after(handoff):
                    await outcome.done.wait()
                if not outcome.done.is_set() and self._hand_off(
                    tool, arguments, parent, controller, outcome, handoff
                ):
                    return outcome
            await outcome.done.wait()
        except anyio.get_cancelled_exc_class():
            # The client cancelled the call or left, or the server is stopping.
            controller.cancel(self._stopping or CLIENT_CANCELLED)
            with anyio.CancelScope(shield=True):
                await outcome.done.wait()
                if delegation and self._stopping is None:
                    ended = (
                        f"the run ended {outcome.settled.stop_reason} and its process tree "
                        "has exited"
                        if outcome.settled is not None
                        else "no run was left running"
                    )
                    text = f"{tool.name}: call cancelled ({CLIENT_CANCELLED}); {ended}"
                    await self._log(connection, "info", CALLS_LOGGER, text)
            raise
        return outcome

    def _hand_off(
        self,
        tool: ModelTool,
        arguments: Mapping[str, object],
        parent: ParentContext,
        controller: CancelController,
        outcome: CallState,
        seconds: float,
    ) -> bool:
        """Turn the running call into a background Job of ``parent``; ``False`` if refused."""
        try:
            job_id = hand_off(
                self._runtime.jobs,
                outcome,
                label=label_of(arguments, tool.name),
                owner=parent,
                controller=controller,
            )
        except JobError as exc:  # e.g. the owner's job limit: the call stays in the foreground
            _log.info("dsh_mcp: %s stays in the foreground: %s", tool.name, exc)
            return False
        outcome.job_id = job_id
        outcome.handoff = ToolResult(handoff_text(tool.name, seconds, job_id))
        return True

    async def _log(
        self, connection: _Connection, level: types.LoggingLevel, logger: str, text: str
    ) -> None:
        """Send one ``notifications/message`` to the connection; best effort, bounded."""
        if not connection.wants(level):
            return
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, logger=logger, data=text)
        )
        try:
            with anyio.move_on_after(_LOG_SEND_SECONDS):
                await connection.session.send_notification(notification)
        except Exception as exc:  # the client may be gone
            _log.info("dsh_mcp: log entry not delivered: %s", type(exc).__name__)

    async def _run_call(
        self,
        tool: ModelTool,
        arguments: Mapping[str, object],
        parent: ParentContext,
        ctx: ServerRequestContext[Any, Any],
        controller: CancelController,
        outcome: CallState,
        delegation: bool,
    ) -> None:
        runs: list[PublishedRun] = []
        progress = progress_token_from_params(ctx.params) is not None
        keep_slot = False
        try:
            async with anyio.create_task_group() as forwarders:

                def on_run(run: PublishedRun) -> None:
                    runs.append(run)
                    outcome.published(run)
                    if progress and outcome.handoff is None:
                        scope = anyio.CancelScope()
                        outcome.progress.append(scope)
                        forwarders.start_soon(_forward_progress, run, ctx.session, scope)

                context = ToolCallContext(parent=parent, cancel=controller.signal, on_run=on_run)
                outcome.result = await run_tool_call(tool, arguments, context)
            if delegation:
                if outcome.handoff is None:  # else job_id is the Job this call became
                    outcome.job_id = self._started_job(arguments, outcome.result)
                    keep_slot = outcome.job_id is not None and self._hold(outcome.job_id, parent)
                if runs:
                    outcome.settled = await _settled(runs[0])
        except Exception as exc:  # a bug here must answer the call, not crash the server
            _log.exception("dsh_mcp: tool call %s failed", tool.name)
            outcome.result = _error(f"internal error ({type(exc).__name__})")
        finally:
            self._live.discard(controller)
            for connection in self._connections.values():
                connection.live.discard(controller)
            self._calls_changed.set()
            self._calls_changed = anyio.Event()
            if delegation and not keep_slot:
                self.slots.release()
            outcome.done.set()

    def cancel_calls(self, reason: str) -> int:
        """Cancel every call still running (the server is stopping); returns how many.

        Calls whose handlers are cancelled from now on are cancelled with ``reason``.
        """
        self._stopping = reason
        live = list(self._live)
        for controller in live:
            controller.cancel(reason)
        return len(live)

    async def wait_calls(self) -> None:
        """Wait until no call is running (after :meth:`cancel_calls`, their runs are gone)."""
        while self._live:
            await self._calls_changed.wait()

    # -- background jobs ---------------------------------------------------------------

    @staticmethod
    def _started_job(arguments: Mapping[str, object], result: ToolResult) -> str | None:
        if arguments.get("run_in_background") is not True or result.is_error:
            return None
        if not result.text.startswith(_BACKGROUND_STARTED):
            return None
        return result.text[len(_BACKGROUND_STARTED) :]

    def _hold(self, job_id: str, parent: ParentContext) -> bool:
        """Keep the call's slot until the Job settles; ``False`` if it already has."""
        try:
            if self._runtime.jobs.get(job_id, parent).terminal:
                return False
        except Exception:
            return False
        self._held[job_id] = self.slots.release
        return True

    def _job_done(self, snapshot: JobSnapshot, owner: ParentContext | None) -> None:
        release = self._held.pop(snapshot.id, None)
        if release is not None:
            release()

    def _notice(self, owner: ParentContext, text: str) -> None:
        """The registry's notice sink: queue a completion notice for the owner's client."""
        try:
            self._notices.send_nowait((owner, text))
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            _log.warning("dsh_mcp: a job completion notice was dropped (queue full or closed)")

    async def _relay_notices(
        self, receive: MemoryObjectReceiveStream[tuple[ParentContext, str]]
    ) -> None:
        """Send queued completion notices to their connections as log entries."""
        async with receive:
            async for owner, text in receive:
                connection = next(
                    (c for c in self._connections.values() if c.session_id == owner.session_id),
                    None,
                )
                if connection is not None:
                    await self._log(connection, _NOTICE_LEVEL, NOTICE_LOGGER, text)


def _output_schema(tool: ModelTool) -> dict[str, JsonValue] | None:
    """A typed subagent tool's ``outputSchema`` (its profile schema, wrapped); else none."""
    schema = tool.config.output_schema if isinstance(tool, SubagentTool) else None
    return None if schema is None else typed_output_schema(schema)


async def _settled(run: PublishedRun) -> SubagentResult | None:
    try:
        return await run.result()
    except Exception:
        return None


async def _forward_progress(
    run: PublishedRun, session: ServerSession, scope: anyio.CancelScope
) -> None:
    """Turn the run's progress into MCP progress notifications until the run settles
    (or ``scope`` is cancelled: the call was answered with a Job id)."""
    count = 0
    with scope:
        try:
            async for event in run.progress:
                message = describe_progress(event)
                if message is None:
                    continue
                count += 1
                await session.report_progress(count, None, message)
        except Exception as exc:  # progress is advisory: never let it end the call
            _log.info("dsh_mcp: progress forwarding stopped: %s", type(exc).__name__)


@asynccontextmanager
async def open_tool_server(
    composition: Composition, settings: ServerSettings
) -> AsyncIterator[ToolServer]:
    """Open the runtime (service, Jobs, tools) and the handlers serving it.

    Leaving waits for every call still running (their runs are cancelled by then, as the
    transport cancelled their handlers), then closes the runtime: background Jobs are
    killed and every product process tree has exited when this returns.
    """
    send, receive = anyio.create_memory_object_stream[tuple[ParentContext, str]](_NOTICE_BUFFER)
    holder: list[ToolServer] = []

    def sink(owner: ParentContext, text: str) -> None:
        if holder:
            holder[0]._notice(owner, text)

    async with (
        open_runtime(composition, notice_sink=sink) as runtime,
        anyio.create_task_group() as calls,
    ):
        if settings.workspace is not None:  # else the pool learns the client's root
            for loaded in composition.providers:
                runtime.service.keep_ready(loaded.provider.name, settings.workspace)
        tool_server = ToolServer(runtime, settings, calls, send)
        holder.append(tool_server)
        calls.start_soon(tool_server._relay_notices, receive)
        try:
            yield tool_server
        finally:
            send.close()
