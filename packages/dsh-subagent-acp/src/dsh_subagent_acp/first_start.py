"""An instance's first agent start runs alone; once one start opened, none waits.

Deliberate: an agent that creates its state on first use can fail when several copies
do that at once. OpenCode 1.18.33 migrates its SQLite database
(``$XDG_DATA_HOME/opencode/opencode.db``) as it starts; two starts on fresh state
directories race, and the loser exits 1 during ``initialize`` (``Failed query: CREATE
TABLE `workspace` ...``), which a ready pool of two or two concurrent runs met about
one time in four. Only the start (spawn through ``session/new``) is serialised, and only
until one of the instance's starts succeeded; a failed first start hands the gate on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio

__all__ = ["FirstStartAlone"]


class FirstStartAlone:
    """The gate of one provider instance (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._opened = False

    @property
    def opened(self) -> bool:
        """Whether one of the instance's starts opened its session."""
        return self._opened

    def open_succeeded(self) -> None:
        """A start opened its session: every later start runs concurrently."""
        self._opened = True

    @contextlib.asynccontextmanager
    async def passage(self) -> AsyncIterator[None]:
        """Held from before the spawn until the start opened or was rolled back."""
        alone = False
        if not self.opened:
            await self._lock.acquire()
            # Still unopened: this start goes alone. Else the start it waited for
            # succeeded, and it goes concurrently.
            alone = not self._opened_now()
            if not alone:
                self._lock.release()
        try:
            yield
        finally:
            if alone:
                self._lock.release()

    def _opened_now(self) -> bool:
        # A call, not the attribute: read again after the wait.
        return self._opened
