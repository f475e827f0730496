"""Lifecycle events of the subagent service and their dispatch rules.

``subagent/provider-added`` is dispatched plainly: a raising listener unwinds the
registration (provider addition fails loudly). Every other event is *contained*: each
listener runs in its own guard, a failure is logged and never starves the remaining
listeners nor changes a run.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

from anyio.abc import TaskGroup

from dsh_subagent.types import ContentBlock, ParentContext, SubagentProvider

__all__ = [
    "PROVIDER_ADDED",
    "PROVIDER_REMOVED",
    "RUN_END",
    "RUN_START",
    "ProviderAdded",
    "ProviderRemoved",
    "SubagentEvent",
    "SubagentEventListener",
    "SubagentRunEnded",
    "SubagentRunStarted",
]

_log = logging.getLogger("dsh_subagent")

PROVIDER_ADDED: Final = "subagent/provider-added"
PROVIDER_REMOVED: Final = "subagent/provider-removed"
RUN_START: Final = "subagent/start"
RUN_END: Final = "subagent/end"


@dataclass(frozen=True, slots=True)
class ProviderAdded:
    """A provider instance was registered under ``provider.name``."""

    provider: SubagentProvider
    type: Literal["subagent/provider-added"] = PROVIDER_ADDED


@dataclass(frozen=True, slots=True)
class ProviderRemoved:
    """The provider registered as ``name`` was removed (runs already handed out live on)."""

    name: str
    type: Literal["subagent/provider-removed"] = PROVIDER_REMOVED


@dataclass(frozen=True, slots=True)
class SubagentRunStarted:
    """A run was published.

    Attributes:
        run_id: Fresh uuid4 minted by the service for this start/end pair.
        provider: The name the run started under.
        id: The provider-minted ``SubagentRun.id``.
        local: Whether the run has an in-process agent.
        parent: The delegating parent; listeners scope by it.
    """

    run_id: str
    provider: str
    id: str
    local: bool
    parent: ParentContext
    type: Literal["subagent/start"] = RUN_START


@dataclass(frozen=True, slots=True)
class SubagentRunEnded:
    """A published run settled; emitted exactly once per :class:`SubagentRunStarted`.

    Attributes:
        run_id: Same as the paired start event.
        provider: Same as the paired start event.
        id: Same as the paired start event.
        local: Same as the paired start event.
        parent: Same as the paired start event.
        stop_reason: The result's stop reason; ``error`` when ``result()`` raised.
        last_assistant_message: The result's output, ``None`` when the output was empty
            or ``result()`` raised.
    """

    run_id: str
    provider: str
    id: str
    local: bool
    parent: ParentContext
    stop_reason: str
    last_assistant_message: tuple[ContentBlock, ...] | None = None
    type: Literal["subagent/end"] = RUN_END


SubagentEvent = ProviderAdded | ProviderRemoved | SubagentRunStarted | SubagentRunEnded

SubagentEventListener = Callable[[SubagentEvent], Awaitable[None] | None]
"""A listener: synchronous, or returning an awaitable the service runs in its task group."""


def render_error(error: BaseException) -> str:
    """``<Name>: <message>``, or a fixed placeholder when the value cannot be rendered."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return "<unrenderable thrown value>"


def _log_failure(event_type: str, verb: str, error: BaseException) -> None:
    _log.error("subagent: %s listener %s: %s", event_type, verb, render_error(error))


async def _await_contained(event_type: str, awaitable: Awaitable[None]) -> None:
    try:
        await awaitable
    except Exception as exc:
        _log_failure(event_type, "rejected", exc)


def dispatch(
    listeners: list[SubagentEventListener],
    event: SubagentEvent,
    *,
    contained: bool,
    task_group: TaskGroup | None,
) -> None:
    """Call every listener with ``event``.

    Uncontained dispatch lets the first synchronous failure propagate. An awaitable a
    listener returns is awaited in ``task_group`` (contained in both modes); with no
    running task group it is closed and logged.
    """
    for listener in list(listeners):
        try:
            returned = listener(event)
        except Exception as exc:
            if not contained:
                raise
            _log_failure(event.type, "threw", exc)
            continue
        if returned is None or not inspect.isawaitable(returned):
            continue
        if task_group is None:
            if inspect.iscoroutine(returned):
                returned.close()
            _log.error(
                "subagent: %s listener returned an awaitable while the service is not running",
                event.type,
            )
            continue
        task_group.start_soon(_await_contained, event.type, returned)
