"""The ready-start hooks of a product provider (``ready:*``, :mod:`dsh_subagent.ready`).

A provider whose :meth:`~dsh_subagent.ProductProvider.launch` and
:meth:`~dsh_subagent.ProductProvider.open` depend only on the cwd and its configuration
declares :attr:`ProductReadyHooks.offers_ready_starts`; the service may then start its
products ahead of their tasks. A product whose protocol lets more of its handshake go
ahead than ``open()`` does for a cold start (the Claude Agent SDK's ``initialize``,
which ``query()`` sends with the prompt) does it in :meth:`ProductReadyHooks.open_ahead`
and keeps what it opened in :attr:`~dsh_subagent.ProductChild.state`, released by
:meth:`ProductReadyHooks.release_state` on every path.

Here too is the claim side of a ready start, what ``ProductProvider.start()`` calls: the
pool the service set (:func:`ready_pool_for`), :func:`claim_ready` and
:func:`publish_claimed`. The pool itself (:class:`~dsh_subagent.ready.ReadyPool`) sits
above :mod:`.product`; here it is seen through :class:`ClaimingPool`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import ClassVar, Protocol

import anyio

from dsh_subagent.budget import BudgetClock
from dsh_subagent.errors import StartCancelledError
from dsh_subagent.product_child import ProductChild
from dsh_subagent.product_seam import ProductSeam
from dsh_subagent.types import ResolvedSubagentStartRequest, SubagentRun

__all__ = [
    "ClaimingPool",
    "ProductReadyHooks",
    "ReadyKey",
    "claim_ready",
    "publish_claimed",
    "ready_pool_for",
    "release_unclaimed",
]

ReadyKey = tuple[str, bool]
"""What a ready product is prepared for: (the cwd, whether progress carries commands)."""


class ClaimingPool(Protocol):
    """What a provider's start sees of the service's pool (a ``ReadyPool``)."""

    @property
    def provider(self) -> object: ...

    def claim(self, key: ReadyKey) -> ProductChild | None: ...


_current: ContextVar[ClaimingPool | None] = ContextVar("dsh_ready_pool", default=None)


class ProductReadyHooks:
    """Mixed into :class:`~dsh_subagent.ProductProvider`; every hook is optional."""

    offers_ready_starts: ClassVar[bool] = False
    """``True`` when :meth:`launch` and :meth:`open` depend only on the cwd and this
    configuration, never on the task: a product can then be started and opened before
    its task arrives (the configuration's ``warm``; :mod:`dsh_subagent.ready`)."""

    async def open_ahead(self, child: ProductChild) -> None:
        """A ready product's handshake beyond :meth:`open`, before any task (optional).

        Called only for a product started ahead of its task, after ``open()``. Do here
        what a cold start does in ``run()`` before the task is sent, and leave in
        ``child.state`` what ``run()`` continues from. Raise for a failed handshake: the
        product is ended and delegations start cold (``ready:never-fails-a-delegation``).
        Bound every wait (e.g. :meth:`~dsh_subagent.ProductChild.await_response`). The
        default does nothing.
        """
        del child

    async def release_state(self, child: ProductChild) -> None:
        """Release what the provider keeps in ``child.state`` (optional).

        Called at the end of every teardown, ready or cold, claimed or not, once the
        child's tree is gone, and also before the tree is ended for a ready product
        that serves no delegation; so possibly more than once. Must not raise and must
        bound its awaits. The default does nothing.
        """
        del child


def claim_ready(provider: object, key: ReadyKey) -> ProductChild | None:
    """The ready product the running service holds for ``provider`` and ``key``, if any."""
    pool = _current.get()
    if pool is None or pool.provider is not provider:
        return None
    return pool.claim(key)


@contextlib.contextmanager
def ready_pool_for(pool: ClaimingPool | None) -> Iterator[None]:
    """Make ``pool`` the one ``provider.start()`` claims from (the service's seam)."""
    token = _current.set(pool)
    try:
        yield
    finally:
        _current.reset(token)


async def release_unclaimed(provider: ProductSeam, child: ProductChild) -> None:
    """End a ready product that serves no delegation."""
    # What open_ahead() opened stops before the tree is ended: a product ended while idle
    # is no failure to report (the SDK would log the CLI's SIGTERM exit as one).
    await provider.release_state(child)
    await provider._release(child)


async def publish_claimed(
    provider: ProductSeam,
    request: ResolvedSubagentStartRequest,
    child: ProductChild,
    texts: list[str],
    clock: BudgetClock,
) -> SubagentRun:
    """Hand a claimed product its one delegation where a cold start stands after
    ``open()``: the task, the budget's idle clock, then the cold start's publication."""
    if request.cancel.aborted:
        with anyio.CancelScope(shield=True):
            await release_unclaimed(provider, child)
        raise StartCancelledError(provider._cancelled_message())
    child.task_texts = tuple(texts)
    clock.attach(child.lines)
    return provider._publish(request, child, clock)
