"""The server-wide bound on concurrent delegations, with a bounded wait for a slot.

Nothing queues without bound: a delegation beyond the bound waits at most
``wait_seconds`` for a slot, then fails with a tool error. A background delegation keeps
its slot until its Job settles, so ``run_in_background`` cannot bypass the bound.
"""

from __future__ import annotations

from typing import Final

import anyio

__all__ = ["DelegationSlots", "busy_message"]

_BUSY: Final = (
    "all {limit} delegation slots of this dsh mcp server are busy (running delegations, "
    "background jobs included, count until they end); waited {wait:g} s for one. Try again "
    "later, or raise max_concurrent_delegations in the profile's [mcp] table"
)


def busy_message(limit: int, wait_seconds: float) -> str:
    """The tool error text of a delegation that found no slot in time."""
    return _BUSY.format(limit=limit, wait=wait_seconds)


class DelegationSlots:
    """At most ``limit`` delegations at once; a waiter gives up after ``wait_seconds``.

    Args:
        limit: Slots (positive).
        wait_seconds: The longest a delegation waits for a slot.
    """

    def __init__(self, limit: int, wait_seconds: float) -> None:
        if limit < 1 or not wait_seconds > 0:
            raise ValueError("limit must be positive and wait_seconds greater than 0")
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._semaphore = anyio.Semaphore(limit, max_value=limit)

    @property
    def in_use(self) -> int:
        """Slots held right now."""
        return self.limit - self._semaphore.value

    async def acquire(self) -> bool:
        """Take a slot; ``False`` when none freed up within ``wait_seconds``."""
        with anyio.move_on_after(self.wait_seconds):
            await self._semaphore.acquire()
            return True
        return False

    def release(self) -> None:
        """Give one slot back (from any task)."""
        self._semaphore.release()
