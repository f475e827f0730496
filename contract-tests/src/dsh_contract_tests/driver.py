"""Drive a provider the way a harness does: through ``dsh_subagent.SubagentService``.

The kit never calls ``provider.start()`` itself; the service's capability checks,
request resolution and lifecycle events are part of what a provider author must pass
with. :class:`SpyProvider` wraps the author's provider so the kit can tell whether
``start()`` was reached at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from dsh_subagent import (
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentEvent,
    SubagentProvider,
    SubagentRun,
    SubagentRunEnded,
    SubagentRunStarted,
    SubagentService,
    SubagentStartRequest,
    text_of,
)

__all__ = ["LifecycleEvent", "ServiceDriver", "SpyProvider", "drive"]


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One ``subagent/start`` or ``subagent/end`` event as the kit recorded it."""

    kind: str
    run_id: str
    id: str
    provider: str
    stop_reason: str | None = None
    last_text: str | None = None


class SpyProvider(SubagentProvider):
    """Transparent wrapper that counts ``start()`` calls of the provider under test."""

    def __init__(self, inner: SubagentProvider) -> None:
        self.inner = inner
        self.start_calls = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> SubagentCapabilities:
        return self.inner.capabilities

    @property
    def inherits_parent_context(self) -> bool:
        return self.inner.inherits_parent_context

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        self.start_calls += 1
        return await self.inner.start(request)


class ServiceDriver:
    """A running service with the spy registered and every lifecycle event recorded."""

    def __init__(self, service: SubagentService, spy: SpyProvider) -> None:
        self._service = service
        self.spy = spy
        self.events: list[LifecycleEvent] = []

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start one run under the provider's registry name."""
        return await self._service.start(self.spy.name, request)

    def record(self, event: SubagentEvent) -> None:
        """Service listener: keep run start and end events."""
        if isinstance(event, SubagentRunStarted):
            self.events.append(LifecycleEvent("start", event.run_id, event.id, event.provider))
        elif isinstance(event, SubagentRunEnded):
            last = event.last_assistant_message
            self.events.append(
                LifecycleEvent(
                    "end",
                    event.run_id,
                    event.id,
                    event.provider,
                    event.stop_reason,
                    None if last is None else text_of(last),
                )
            )


@asynccontextmanager
async def drive(provider: SubagentProvider) -> AsyncIterator[ServiceDriver]:
    """Register ``provider`` (wrapped in a :class:`SpyProvider`) in a fresh service."""
    spy = SpyProvider(provider)
    async with SubagentService() as service:
        driver = ServiceDriver(service, spy)
        service.add_listener(driver.record)
        service.register_provider(spy)
        yield driver
