"""The common case in one call: one task to one provider, answer back, nothing left running.

:func:`delegate` is a thin layer over :class:`~dsh_subagent.SubagentService`, so every
rule of a service-started run holds (checks before start, never-raising settlement,
disposal down to whole-tree exit); it only removes the ceremony of registering the
provider, building the request and disposing in ``finally``. :func:`delegate_sync` is the
same for scripts that have no event loop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Final, Protocol, runtime_checkable

import anyio
from pydantic import BaseModel, JsonValue

from dsh_subagent.budget import Budget
from dsh_subagent.cancel import CancelSignal
from dsh_subagent.continuation import ContinuationHandle
from dsh_subagent.errors import SubagentError, SubagentErrorCode
from dsh_subagent.progress import ProgressListener
from dsh_subagent.service import SubagentService
from dsh_subagent.types import (
    ParentContext,
    SubagentProvider,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
)

__all__ = ["Isolation", "delegate", "delegate_sync"]

DELEGATE_SESSION_PREFIX: Final = "delegate-"


@runtime_checkable
class Isolation(Protocol):
    """Wraps a provider so that each of its runs works in isolation.

    The wrapped provider keeps the inner provider's name, capabilities and behaviour and
    fills ``changes`` on every result.
    """

    def isolate(self, provider: SubagentProvider) -> SubagentProvider:
        """The isolated provider around ``provider`` (constructing it starts nothing)."""
        ...


async def delegate(
    target: SubagentProvider | SubagentService,
    task: str,
    *,
    cwd: str | os.PathLike[str],
    provider: str | None = None,
    cancel: CancelSignal | None = None,
    session_id: str | None = None,
    budget: Budget | None = None,
    on_progress: ProgressListener | None = None,
    progress_commands: bool = False,
    isolation: Isolation | None = None,
    resume: ContinuationHandle | None = None,
    output_schema: Mapping[str, JsonValue] | type[BaseModel] | None = None,
) -> SubagentResult:
    """Delegate ``task`` and return the settled result; the run is always disposed.

    Args:
        target: A provider (a private service is opened around this one call) or a
            running :class:`SubagentService` (then name the registered ``provider``).
        task: The complete, self-contained task text.
        cwd: The workspace the child works in (the parent session's cwd); a relative
            path resolves against the current directory.
        provider: The registered provider name, when ``target`` is a service.
        cancel: Settles the run ``aborted`` when it fires.
        session_id: The parent session id (default: a fresh ``delegate-<uuid>``).
        budget: Tightens the provider instance's deadline / idle timeout for this run
            (never extends them); a provider that cannot enforce budgets refuses it.
        on_progress: Called with every progress event the run keeps, in order, from
            the first; it must not block (it runs on the event loop). Progress carries
            product text: it is for the host and its people, never for a model.
        progress_commands: Let tool progress carry the command text.
        isolation: Run the provider isolated (e.g. ``dsh_worktree.Worktree()``: a git
            worktree of the cwd's repository on a new branch); the result's ``changes``
            then says what the run changed. With a service target, register the isolated
            provider instead (``isolation.isolate(provider)``).
        resume: Continue the product session an earlier result's ``continuation``
            names: a follow-up delegation of its own (its own process tree and result).
        output_schema: The shape the answer must have: a pydantic model class or an
            object-rooted JSON Schema. A provider that cannot enforce it refuses it
            before start (``UNSUPPORTED_CAPABILITY``); otherwise the result's
            ``structured`` is the validated object (a model instance for a model), or
            the run settles ``error`` with category ``output-invalid``.

    Returns:
        The result: ``completed`` with the answer, or ``error``/``aborted``/... with the
        safe diagnostic. A child failure never raises.

    Raises:
        SubagentError: The start was refused or failed before publication (nothing is
            left running), e.g. ``NO_PROVIDER``, ``INVALID_REQUEST``,
            ``PRODUCT_START_FAILED``, ``START_CANCELLED``, or ``CONTINUATION_UNAVAILABLE``
            for a handle the provider cannot continue.

    If the calling task is cancelled, the run is disposed (its whole process tree gone)
    before the cancellation propagates.
    """
    parent = ParentContext(
        session_id=session_id or f"{DELEGATE_SESSION_PREFIX}{uuid.uuid4()}",
        cwd=_absolute(cwd),
    )
    request = SubagentStartRequest(
        prompt=(TextBlock(text=task),),
        parent=parent,
        budget=budget,
        progress_commands=progress_commands,
        resume=resume,
        output_schema=output_schema,
    )
    if cancel is not None:
        request = request.model_copy(update={"cancel": cancel})
    if isinstance(target, SubagentService):
        if provider is None:
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                "delegate: name the registered provider when delegating through a service",
            )
        if isolation is not None:
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                "delegate: isolation wraps a provider; register isolation.isolate(provider) "
                "with the service instead",
            )
        return await _run(target, provider, request, on_progress)
    if provider is not None and provider != target.name:
        raise SubagentError(
            SubagentErrorCode.INVALID_REQUEST,
            f"delegate: provider {provider!r} does not name the given provider",
        )
    if isolation is not None:
        target = isolation.isolate(target)
    async with SubagentService() as service:
        service.register_provider(target)
        return await _run(service, target.name, request, on_progress)


def _absolute(cwd: str | os.PathLike[str]) -> str:
    # Lexical only (no filesystem access): the provider probes the directory at start.
    return os.path.abspath(os.fspath(cwd))


async def _run(
    service: SubagentService,
    name: str,
    request: SubagentStartRequest,
    on_progress: ProgressListener | None,
) -> SubagentResult:
    run = await service.start(name, request)
    try:
        if on_progress is None:
            return await run.result()
        # The iterator, not a listener: it also hands over what was kept before this
        # line ran, and it ends when the run settles.
        async for event in run.progress:
            on_progress(event)
        return await run.result()
    finally:
        with anyio.CancelScope(shield=True):
            await run.dispose()


def delegate_sync(
    provider: SubagentProvider,
    task: str,
    *,
    cwd: str | os.PathLike[str],
    backend: str = "asyncio",
    budget: Budget | None = None,
    on_progress: ProgressListener | None = None,
    isolation: Isolation | None = None,
    resume: ContinuationHandle | None = None,
    output_schema: Mapping[str, JsonValue] | type[BaseModel] | None = None,
) -> SubagentResult:
    """Blocking :func:`delegate` for scripts: runs its own event loop.

    Ctrl-C disposes the run (its whole process tree gone) and then raises
    ``KeyboardInterrupt``. Must not be called from inside a running event loop.

    Args:
        provider: The provider instance.
        task: The complete, self-contained task text.
        cwd: The workspace the child works in.
        backend: The anyio backend (``"asyncio"`` or ``"trio"``).
        budget: As for :func:`delegate`.
        on_progress: As for :func:`delegate`.
        isolation: As for :func:`delegate`.
        resume: As for :func:`delegate`.
        output_schema: As for :func:`delegate`.
    """

    async def main() -> SubagentResult:
        return await delegate(
            provider,
            task,
            cwd=cwd,
            budget=budget,
            on_progress=on_progress,
            isolation=isolation,
            resume=resume,
            output_schema=output_schema,
        )

    return anyio.run(main, backend=backend)
