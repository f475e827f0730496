"""Run budgets: a wall-clock deadline and an idle timeout, enforced by the runtime.

A provider instance's configuration sets the bounds (``deadline_seconds``,
``idle_timeout_seconds``; none by default). Host code may tighten them for one request
with :class:`Budget`; a request can shorten a configured bound, never extend it, and the
model-facing tools expose nothing that touches either.

When a bound runs out the run settles ``error`` with the fixed diagnostic line naming the
stage it happened in and the category ``deadline-exceeded`` or ``idle-timeout``, and the
product's whole process tree is gone before the result is delivered. Startup counts
against the deadline (an expiry before publication is a start error with the same line).
"Idle" means the product wrote nothing on its stdout for that long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

import anyio
from pydantic import BaseModel, ConfigDict, PositiveFloat

if TYPE_CHECKING:
    from dsh_subagent.lines import LineReader

__all__ = [
    "DEADLINE_EXCEEDED",
    "IDLE_TIMEOUT",
    "Budget",
    "BudgetCategory",
    "BudgetClock",
    "EffectiveBudget",
]

BudgetCategory = Literal["deadline-exceeded", "idle-timeout"]
DEADLINE_EXCEEDED: Final = "deadline-exceeded"
IDLE_TIMEOUT: Final = "idle-timeout"


class Budget(BaseModel):
    """Per-request bounds; each only tightens the provider's configured one.

    Attributes:
        deadline_seconds: Wall-clock bound from ``start()`` to the result, startup
            included.
        idle_timeout_seconds: Longest stretch with no output from the product.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    deadline_seconds: PositiveFloat | None = None
    idle_timeout_seconds: PositiveFloat | None = None


def _tighter(configured: float | None, requested: float | None) -> float | None:
    if configured is None:
        return requested
    if requested is None:
        return configured
    return min(configured, requested)


@dataclass(frozen=True)
class EffectiveBudget:
    """The bounds in force for one run: the tighter of configuration and request."""

    deadline_seconds: float | None = None
    idle_timeout_seconds: float | None = None

    @classmethod
    def of(
        cls,
        deadline_seconds: float | None,
        idle_timeout_seconds: float | None,
        request: Budget | None,
    ) -> EffectiveBudget:
        """Combine configured bounds with a request's (which may only tighten them)."""
        if request is None:
            return cls(deadline_seconds, idle_timeout_seconds)
        return cls(
            _tighter(deadline_seconds, request.deadline_seconds),
            _tighter(idle_timeout_seconds, request.idle_timeout_seconds),
        )

    @property
    def bounded(self) -> bool:
        """Whether any bound is in force."""
        return self.deadline_seconds is not None or self.idle_timeout_seconds is not None


class BudgetClock:
    """Enforces one run's bounds through cancel scopes whose deadline follows activity.

    No watcher task: :meth:`scope` returns a cancel scope whose deadline is the nearer of
    the run deadline and "last product output + idle timeout"; :meth:`attach` moves that
    deadline forward each time the product writes. When the scope catches its own
    cancellation, :meth:`expired` tells which bound ran out.
    """

    def __init__(self, budget: EffectiveBudget) -> None:
        now = anyio.current_time()
        self._budget = budget
        self._deadline_at = (
            math.inf if budget.deadline_seconds is None else now + budget.deadline_seconds
        )
        self._idle = budget.idle_timeout_seconds
        self._last_activity: float | None = None
        self._scopes: list[anyio.CancelScope] = []

    def _next(self) -> float:
        if self._idle is None or self._last_activity is None:
            return self._deadline_at
        return min(self._deadline_at, self._last_activity + self._idle)

    def scope(self) -> anyio.CancelScope:
        """A cancel scope that is cancelled when a bound runs out."""
        scope = anyio.CancelScope(deadline=self._next())
        self._scopes.append(scope)
        return scope

    def activity(self) -> None:
        """The product wrote something: the idle bound starts again from now."""
        if self._idle is None:
            return
        self._last_activity = anyio.current_time()
        deadline = self._next()
        for scope in self._scopes:
            scope.deadline = deadline

    def attach(self, reader: LineReader) -> None:
        """Measure idleness from ``reader``'s deliveries, starting now."""
        reader.activity_listener = self.activity
        self.activity()

    def expired(self) -> BudgetCategory:
        """The bound that ran out (call after a :meth:`scope` caught its cancellation)."""
        if anyio.current_time() >= self._deadline_at:
            return "deadline-exceeded"
        return "idle-timeout"
