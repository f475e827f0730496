"""The ready-start hooks of a product provider (``ready:*``, :mod:`dsh_subagent.ready`).

A provider whose :meth:`~dsh_subagent.ProductProvider.launch` and
:meth:`~dsh_subagent.ProductProvider.open` depend only on the cwd and its configuration
declares :attr:`ProductReadyHooks.offers_ready_starts`; the service may then start its
products ahead of their tasks. A product whose protocol lets more of its handshake go
ahead than ``open()`` does for a cold start (the Claude Agent SDK's ``initialize``,
which ``query()`` sends with the prompt) does it in :meth:`ProductReadyHooks.open_ahead`
and keeps what it opened in :attr:`~dsh_subagent.ProductChild.state`, released by
:meth:`ProductReadyHooks.release_state` on every path.
"""

from __future__ import annotations

from typing import ClassVar

from dsh_subagent.product_child import ProductChild

__all__ = ["ProductReadyHooks"]


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
