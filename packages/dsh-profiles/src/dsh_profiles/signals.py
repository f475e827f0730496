"""Ctrl-C and SIGTERM as a cancellation, for a host that asks for it.

A library must not take over its host's signals behind its back: :func:`dsh_profiles.run.run_task`
and ``dsh_batch.run_batch`` watch SIGINT and SIGTERM only with ``handle_signals=True``
(the ``dsh`` command passes it), for the call's whole length, and the previous handlers
are back when the call returns. Without it a host cancels through its own
:class:`~dsh_subagent.CancelSignal`.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
from dsh_subagent import CancelController, CancelSignal

__all__ = ["cancellation", "watch_signals"]


@asynccontextmanager
async def cancellation(
    cancel: CancelSignal | None,
    *,
    handle_signals: bool,
    notify: Callable[[str], None],
    first: Callable[[str], str],
    again: str,
) -> AsyncIterator[CancelController]:
    """A controller of the call's own for the block: the caller's ``cancel`` cancels it
    and, with ``handle_signals``, so do SIGINT and SIGTERM (see :func:`watch_signals`,
    whose arguments ``notify``, ``first`` and ``again`` are). The caller's signal is
    not touched, and its listener goes with the block.

    The watcher is open before the block runs (a signal right after a product started
    must cancel it like any other) and stays open until the block has ended, so a signal
    during teardown never interrupts it.
    """
    controller = CancelController()
    remove = None
    if cancel is not None:
        if cancel.aborted:
            controller.cancel(cancel.reason or "aborted")
        else:
            remove = cancel.add_listener(controller.cancel)
    try:
        if not handle_signals:
            yield controller
            return
        async with anyio.create_task_group() as group:
            watch = functools.partial(watch_signals, controller, notify, first=first, again=again)
            await group.start(watch)
            try:
                yield controller
            finally:
                group.cancel_scope.cancel()
    finally:
        if remove is not None:
            remove()


async def watch_signals(
    controller: CancelController,
    notify: Callable[[str], None],
    *,
    first: Callable[[str], str],
    again: str,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel ``controller`` at the first SIGINT or SIGTERM, until this task is cancelled.

    Start it with ``task_group.start`` so the receiver is open before the caller goes
    on (a signal right after a product started must cancel it like any other). It must
    run in the main thread (Python delivers signals there only).

    Args:
        controller: Cancelled with the reason ``interrupted (SIGINT)`` (or ``SIGTERM``).
        notify: Called with one line for each signal (no ``dsh:`` prefix).
        first: The line for the first signal, from its name (``SIGINT``).
        again: The line for a signal after the first (the cancellation is under way).
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if controller.signal.aborted:
                notify(again)
                continue
            name = signal.Signals(signum).name
            notify(first(name))
            controller.cancel(f"interrupted ({name})")
