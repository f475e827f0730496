"""What the start's helpers below :class:`~dsh_subagent.ProductProvider` call back on it.

The rollback (:mod:`.product_rollback`) and the publication of a claimed ready product
(:mod:`.product_ready`) run parts of ``ProductProvider.start()``. They reach the provider
through this protocol, not the class, so that :mod:`.product`, which imports them, is the
only one of them importing the other (no import cycle: docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol

from dsh_subagent.budget import BudgetClock
from dsh_subagent.diagnostics import ProductFailure
from dsh_subagent.product_child import ProductChild
from dsh_subagent.types import ResolvedSubagentStartRequest, SubagentRun

__all__ = ["ProductSeam"]


class ProductSeam(Protocol):
    """The members of a ``ProductProvider`` its start's helpers use."""

    @property
    def product(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    def _line(self, failure: ProductFailure, detail: str | None = None) -> str: ...

    def _teardown_line(self, child: ProductChild) -> str: ...

    def _cancelled_message(self) -> str: ...

    async def _release(self, child: ProductChild) -> None: ...

    async def release_state(self, child: ProductChild) -> None: ...

    def _publish(
        self, request: ResolvedSubagentStartRequest, child: ProductChild, clock: BudgetClock
    ) -> SubagentRun: ...
