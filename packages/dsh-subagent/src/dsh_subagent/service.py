"""``SubagentService``: the registry of named providers and the one way to start a run.

``start(name, request)`` checks in a fixed order (``capability:refused-before-start``)
and every failure before publication raises a :class:`SubagentError`, publishes nothing
and emits no event:

1. provider lookup → ``NO_PROVIDER``;
2. capabilities, by presence (``is not None``), in the order agent_options →
   output_schema → max_depth (flag ``depth_limit``) → tool_filter → persona → resume
   (flag ``continuation``); the first unsupported field → ``UNSUPPORTED_CAPABILITY``;
   never accepted-then-ignored;
3. every string of the request (the prompt, persona, the parent's cwd, ...) must be
   valid UTF-8, the ``max_depth`` value, then the output schema (object root, a valid
   JSON Schema) →
   ``INVALID_REQUEST`` (the UTF-8 refusal names the field and never repeats the text:
   :mod:`dsh_subagent.utf8`); a continuation handle issued by another provider instance
   → ``CONTINUATION_UNAVAILABLE`` (the fixed line);
4. descriptor snapshot and a *new* resolved request carrying the service task group;
5. ``provider.start`` (its failure propagates unchanged); with an ``output_schema`` the
   published run's result is validated by the host (:mod:`dsh_subagent.structured`).

After publication the service emits ``subagent/start`` and exactly one
``subagent/end``, with a fresh run id per accepted run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

import anyio
from anyio.abc import TaskGroup

from dsh_subagent.continuation import CONTINUATION_UNAVAILABLE_MESSAGE
from dsh_subagent.errors import ContinuationUnavailableError, SubagentError, SubagentErrorCode
from dsh_subagent.events import (
    ProviderAdded,
    ProviderRemoved,
    SubagentEvent,
    SubagentEventListener,
    SubagentRunEnded,
    SubagentRunStarted,
    dispatch,
    render_error,
)
from dsh_subagent.observe import RunObservation, notify, observing_start, open_observations
from dsh_subagent.product import ProductProvider
from dsh_subagent.progress import ProgressStream
from dsh_subagent.ready import HoldsReady, ReadyPool, ready_pool_for
from dsh_subagent.structured import StructuredRun, check_output_schema
from dsh_subagent.types import (
    ERROR,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubagentDescriptor,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
)
from dsh_subagent.utf8 import check_request_text
from dsh_subagent.workdir import resolve_child_cwd

__all__ = [
    "MAX_SAFE_INTEGER",
    "SHUTDOWN_DRAIN_SECONDS",
    "PublishedRun",
    "SubagentService",
    "check_max_depth",
]

_log = logging.getLogger("dsh_subagent")

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Largest accepted ``max_depth`` (the reference's safe-integer range)."""

SHUTDOWN_DRAIN_SECONDS: Final = 10.0
"""How long service exit waits, after disposing every run, for run tasks to finish."""

# (request field, capability flag) in the contract's check order.
_GATED_FIELDS: Final = (
    ("agent_options", "agent_options"),
    ("output_schema", "output_schema"),
    ("max_depth", "depth_limit"),
    ("tool_filter", "tool_filter"),
    ("persona", "persona"),
    ("resume", "continuation"),
)


def check_max_depth(value: object, *, prefix: str = "subagent") -> int:
    """Validate a depth cap: a non-negative int (not bool) no greater than 2**53 - 1.

    Raises:
        SubagentError: ``INVALID_REQUEST``, ``<prefix> max_depth must be a non-negative
            safe integer``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            f"{prefix} max_depth must be a non-negative safe integer",
        )
    return value


async def _leave_task_group(
    task_group: TaskGroup,
    exc_info: tuple[type[BaseException] | None, BaseException | None, TracebackType | None],
    failures: list[Exception],
) -> None:
    """Exit the service's task group without wrapping the body's exception.

    Only a cancellation is handed to the task group (its cancel scope must see it);
    anyio would wrap any other body exception in an ``ExceptionGroup``, so the group
    exits as if the body had finished (its scope is already cancelled) and the body's
    exception propagates unchanged. Errors of the group's own tasks meanwhile join
    ``failures``.
    """
    exc = exc_info[1]
    if exc is None or isinstance(exc, anyio.get_cancelled_exc_class()):
        await task_group.__aexit__(*exc_info)
        return
    try:
        await task_group.__aexit__(None, None, None)
    except ExceptionGroup as group:
        failures.extend(group.exceptions)


class PublishedRun:
    """The service's view of a published run; implements :class:`SubagentRun`.

    It forwards to the provider's run and records disposal, so leaving the service can
    dispose exactly the runs whose holders have not.
    """

    __slots__ = (
        "_disposing",
        "_inner",
        "_observations",
        "_service",
        "progress",
        "provider",
        "run_id",
    )

    def __init__(
        self,
        service: SubagentService,
        inner: SubagentRun,
        run_id: str,
        provider: str,
        observations: tuple[RunObservation, ...] = (),
    ) -> None:
        self._service = service
        self._inner = inner
        self._observations = observations
        self._disposing = False
        self.run_id = run_id
        """The service-minted id shared by this run's start and end events."""
        self.provider = provider
        """The provider name the run started under."""
        stream = getattr(inner, "progress", None)
        self.progress: ProgressStream = (
            stream if isinstance(stream, ProgressStream) else ProgressStream()
        )
        """The run's live progress (``async for event in run.progress``); it ends when the
        run settles. Empty for a provider that reports none."""

    @property
    def id(self) -> str:
        """The provider-minted run id."""
        return self._inner.id

    @property
    def local_agent(self) -> object | None:
        """The provider run's in-process agent (``None`` out of process)."""
        return self._inner.local_agent

    async def result(self) -> SubagentResult:
        """The provider run's result (see :class:`SubagentRun`)."""
        return await self._inner.result()

    async def dispose(self) -> None:
        """Dispose the provider run (memoised by the provider)."""
        first = not self._disposing
        self._disposing = True
        if not first or not self._observations:
            try:
                await self._inner.dispose()
            finally:
                self._service._live.pop(self.run_id, None)
            return
        notify(self._observations, lambda o: o.teardown_started())
        error: BaseException | None = None
        try:
            await self._inner.dispose()
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._service._live.pop(self.run_id, None)
            notify(self._observations, lambda o: o.teardown_ended(error))


class SubagentService:
    """Registry of named provider instances and the start/observe path of every run.

    Use as an async context manager: it owns the task group where providers drive
    published runs and where the service observes their results. Leaving it disposes
    every run whose holder has not, then waits for run tasks to finish.

    An exception raised in the ``async with`` body reaches the caller as itself, never
    wrapped in an ``ExceptionGroup``. If leaving also fails (a dispose, or one of the
    service's own tasks), the body's exception still wins: each shutdown failure is
    logged on ``dsh_subagent`` and attached to it as a note. Without a body exception,
    shutdown failures are raised as an ``ExceptionGroup``.
    """

    def __init__(self) -> None:
        self._providers: dict[str, SubagentProvider] = {}
        self._listeners: list[SubagentEventListener] = []
        self._live: dict[str, PublishedRun] = {}
        self._task_group: TaskGroup | None = None
        self._closing = False
        self._observing = 0
        self._idle: anyio.Event | None = None
        self._starting = 0
        self._starts_idle: anyio.Event | None = None
        self._pools: dict[str, ReadyPool] = {}

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._task_group is not None or self._closing:
            raise RuntimeError("SubagentService can be entered once")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None, "SubagentService was not entered"
        self._closing = True
        failures: list[Exception] = []
        try:
            with anyio.CancelScope(shield=True):
                # Starts in flight still hold the task group; let them finish (they see
                # the closing flag and tear their run down) before it stops.
                with anyio.move_on_after(SHUTDOWN_DRAIN_SECONDS):
                    await self._wait_for_starts()
                await self._close_pools()
                await self._dispose_live(failures)
                with anyio.move_on_after(SHUTDOWN_DRAIN_SECONDS):
                    await self._drain()
            task_group.cancel_scope.cancel()
        finally:
            self._task_group = None
            await _leave_task_group(task_group, (exc_type, exc, tb), failures)
        if failures and exc is None:
            raise ExceptionGroup("subagent runs failed to dispose at service exit", failures)
        for failure in failures:
            line = f"subagent: service exit failed: {render_error(failure)}"
            _log.error("%s", line)
            assert exc is not None
            exc.add_note(line)
        return None

    async def _dispose_live(self, failures: list[Exception]) -> None:
        async def dispose(run: PublishedRun) -> None:
            try:
                await run.dispose()
            except Exception as error:
                failures.append(error)

        async with anyio.create_task_group() as group:
            for run in list(self._live.values()):
                group.start_soon(dispose, run)

    async def _close_pools(self) -> None:
        # ready:close-leaves-nothing: every idle or half-prepared product's tree ends.
        pools, self._pools = list(self._pools.values()), {}
        async with anyio.create_task_group() as group:
            for pool in pools:
                group.start_soon(pool.aclose)

    async def _wait_for_starts(self) -> None:
        while self._starting:
            self._starts_idle = anyio.Event()
            await self._starts_idle.wait()

    async def _drain(self) -> None:
        # Disposed runs settle promptly; wait for their observers to emit subagent/end.
        while self._observing:
            self._idle = anyio.Event()
            await self._idle.wait()

    # -- registry --------------------------------------------------------------------

    def add_listener(self, listener: SubagentEventListener) -> Callable[[], None]:
        """Subscribe to every lifecycle event; returns an idempotent remover."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def register_provider(self, provider: SubagentProvider) -> Callable[[], None]:
        """Register ``provider`` under ``provider.name``; returns an idempotent remover.

        ``subagent/provider-added`` listeners are not contained: if one raises, the
        registration is rolled back (listeners that already heard the addition are told
        ``subagent/provider-removed``) and the error propagates.

        Raises:
            SubagentError: ``DUPLICATE_PROVIDER`` when the name is taken.
        """
        name = provider.name
        if name in self._providers:
            raise SubagentError(
                SubagentErrorCode.DUPLICATE_PROVIDER,
                f'a subagent provider named "{name}" is already registered',
            )
        self._providers[name] = provider
        try:
            self._emit(ProviderAdded(provider), contained=False)
        except BaseException:
            del self._providers[name]
            self._emit(ProviderRemoved(name), contained=True)
            raise

        def remove() -> None:
            if self._providers.get(name) is provider:
                del self._providers[name]
                self._emit(ProviderRemoved(name), contained=True)

        return remove

    def list(self) -> tuple[str, ...]:
        """Registered provider names in registration order."""
        return tuple(self._providers)

    def get_provider(self, name: str) -> SubagentProvider | None:
        """The provider registered as ``name``, if any."""
        return self._providers.get(name)

    # -- start -----------------------------------------------------------------------

    async def start(self, name: str, request: SubagentStartRequest) -> PublishedRun:
        """Check, resolve and start one run on the provider registered as ``name``.

        Returns:
            The published run. The caller owns it and must ``dispose()`` it.

        Raises:
            SubagentError: ``NO_PROVIDER``, ``UNSUPPORTED_CAPABILITY``,
                ``INVALID_REQUEST`` or ``CONTINUATION_UNAVAILABLE`` before the provider is
                called; anything
                ``provider.start`` raises propagates unchanged. No event is emitted.
            RuntimeError: The service is not running.
        """
        task_group = self._task_group
        if task_group is None or self._closing:
            raise RuntimeError("SubagentService is not running (use `async with service:`)")
        observations = open_observations(name, self._providers.get(name), request)
        if not observations:
            return await self._start(name, request, task_group, observations)
        try:
            with observing_start(observations):
                run = await self._start(name, request, task_group, observations)
        except BaseException as exc:
            error = exc  # the lambda outlives nothing, but `exc` is unbound after the block
            notify(observations, lambda o: o.start_failed(error))
            raise
        notify(observations, lambda o: o.started(run))
        return run

    async def _start(
        self,
        name: str,
        request: SubagentStartRequest,
        task_group: TaskGroup,
        observations: tuple[RunObservation, ...],
    ) -> PublishedRun:
        provider = self._providers.get(name)
        if provider is None:
            raise SubagentError(
                SubagentErrorCode.NO_PROVIDER, f'no subagent provider registered for "{name}"'
            )
        capabilities = provider.capabilities
        for field, flag in _GATED_FIELDS:
            if getattr(request, field) is not None and not getattr(capabilities, flag):
                raise SubagentError(
                    SubagentErrorCode.UNSUPPORTED_CAPABILITY,
                    f'subagent provider "{provider.name}" does not support the "{flag}" '
                    f'capability (request field "{field}")',
                )
        if request.budget is not None and not provider.honours_budgets:
            raise SubagentError(
                SubagentErrorCode.UNSUPPORTED_CAPABILITY,
                f'subagent provider "{provider.name}" does not honour run budgets '
                '(request field "budget")',
            )
        check_request_text(request)
        if request.max_depth is not None:
            check_max_depth(request.max_depth)
        if request.output_schema is not None:
            check_output_schema(request.output_schema)
        if request.resume is not None and request.resume.provider != name:
            raise ContinuationUnavailableError(CONTINUATION_UNAVAILABLE_MESSAGE)
        descriptor = SubagentDescriptor(provider=name, label=request.label)
        resolved = ResolvedSubagentStartRequest(
            **{field: getattr(request, field) for field in SubagentStartRequest.model_fields},
            descriptor=descriptor,
            task_group=task_group,
        )
        self._starting += 1
        try:
            ready = self._pool_of(name, provider, task_group, request.progress_commands)
            with ready_pool_for(ready):
                inner = await provider.start(resolved)
        finally:
            self._starting -= 1
            if self._starting == 0 and self._starts_idle is not None:
                self._starts_idle.set()
        if request.output_schema is not None:
            # The host validates the answer whatever the provider (output:nonconforming-fails).
            inner = StructuredRun(inner, request.output_schema)
        if self._closed_meanwhile():
            # The service began closing while the provider was starting: nobody would
            # dispose this run at exit, so tear it down here and publish nothing.
            with anyio.CancelScope(shield=True):
                try:
                    await inner.dispose()
                except Exception as exc:
                    _log.error(
                        "subagent: dispose of a run started during exit failed: %s",
                        render_error(exc),
                    )
            raise RuntimeError("SubagentService closed while the run was starting")
        return self._publish(name, inner, request.parent, task_group, observations)

    def _pool_of(
        self,
        name: str,
        provider: SubagentProvider,
        task_group: TaskGroup,
        progress_commands: bool = False,
    ) -> ReadyPool | None:
        # A wrapper that prepares its runs' directories (worktree isolation) gets a
        # per-key pool of its inner product's ready products, one per such directory.
        wrapper = provider if isinstance(provider, HoldsReady) else None
        product = wrapper.inner if wrapper is not None else provider
        pool = self._pools.get(name)
        if pool is not None and pool.provider is product:
            return pool
        if not isinstance(product, ProductProvider) or self._closing:
            return None
        warm = product.config.warm
        if warm == 0 or not product.offers_ready_starts:
            return None
        if pool is not None:  # the name was registered again with another instance
            del self._pools[name]
            task_group.start_soon(pool.aclose)
        pool = ReadyPool(product, warm, task_group, per_key=wrapper is not None)
        if wrapper is not None and not wrapper.hold_ready(pool, progress_commands):
            return None  # no directory is prepared ahead: every delegation starts cold
        self._pools[name] = pool
        return pool

    def ready_pool(self, name: str) -> ReadyPool | None:
        """The ready products kept for the provider registered as ``name``, if any.

        A pool exists once the instance (``warm`` > 0, a provider that offers ready
        starts) served a delegation or :meth:`keep_ready` named it.
        """
        return self._pools.get(name)

    def keep_ready(self, name: str, cwd: str, *, progress_commands: bool = False) -> bool:
        """Start preparing ``name``'s ready products for delegations in ``cwd`` now.

        Without it the pool learns the cwd from the first delegation (which starts
        cold). Returns whether anything is kept ready (``False`` for an instance with
        ``warm = 0``, a provider that does not offer ready starts, an unknown name or a
        cwd that is not a usable directory).

        Raises:
            RuntimeError: The service is not running.
        """
        task_group = self._task_group
        if task_group is None or self._closing:
            raise RuntimeError("SubagentService is not running (use `async with service:`)")
        provider = self._providers.get(name)
        pool = (
            None
            if provider is None
            else self._pool_of(name, provider, task_group, progress_commands)
        )
        if pool is None:
            return False
        if pool.per_key:
            return True  # the wrapper names the directories (its warm worktrees)
        assert isinstance(provider, ProductProvider)
        try:
            resolved = resolve_child_cwd(provider.prefix, provider.config.cwd, cwd)
        except SubagentError:
            return False  # a delegation there fails with the cwd's own message
        pool.prepare((resolved, progress_commands))
        return True

    def _closed_meanwhile(self) -> bool:
        # A method, not an inline check: the flag changes across the await above.
        return self._closing

    def _publish(
        self,
        name: str,
        inner: SubagentRun,
        parent: ParentContext,
        task_group: TaskGroup,
        observations: tuple[RunObservation, ...],
    ) -> PublishedRun:
        run = PublishedRun(self, inner, str(uuid.uuid4()), name, observations)
        local = inner.local_agent is not None
        self._live[run.run_id] = run
        started = SubagentRunStarted(
            run_id=run.run_id, provider=name, id=inner.id, local=local, parent=parent
        )
        self._observing += 1
        task_group.start_soon(self._observe, inner, started, run.progress, observations)
        self._emit(started, contained=True)
        return run

    async def _observe(
        self,
        run: SubagentRun,
        started: SubagentRunStarted,
        progress: ProgressStream,
        observations: tuple[RunObservation, ...],
    ) -> None:
        stop_reason = ERROR
        output = None
        result: SubagentResult | None = None
        error: BaseException | None = None
        try:
            result = await run.result()
            stop_reason = result.stop_reason
            output = result.output or None
        except Exception as exc:  # the holder still sees the raise; the pair still closes
            error = exc
            _log.warning("subagent: run %s result raised: %s", started.run_id, render_error(exc))
        finally:
            if observations:
                notify(observations, lambda o: o.settled(result, error))
            progress.close()  # idempotent: the runtime closes its own at settlement
            self._observing -= 1
            if self._observing == 0 and self._idle is not None:
                self._idle.set()
            self._emit(
                SubagentRunEnded(
                    run_id=started.run_id,
                    provider=started.provider,
                    id=started.id,
                    local=started.local,
                    parent=started.parent,
                    stop_reason=stop_reason,
                    last_assistant_message=output,
                ),
                contained=True,
            )

    def _emit(self, event: SubagentEvent, *, contained: bool) -> None:
        dispatch(self._listeners, event, contained=contained, task_group=self._task_group)
