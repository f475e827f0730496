"""``AcpProvider``: delegate one task to any Agent Client Protocol agent (seed 002)."""

from __future__ import annotations

import asyncio  # noqa: TID251 - only to detect the backend the acp library requires
import logging
from typing import ClassVar

import anyio
from dsh_subagent import (
    LocalCancellation,
    OutOfProcessProvider,
    ProductStartError,
    ResolvedSubagentStartRequest,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
    SubprocessRunHandle,
    one_shot_task_texts,
    settle_run_result,
)
from dsh_subagent.workdir import resolve_child_cwd
from dsh_subprocess import SpawnError, SpawnSpec, spawn

from dsh_subagent_acp.child import AcpChild
from dsh_subagent_acp.config import AcpConfig
from dsh_subagent_acp.errors import AcpFailure
from dsh_subagent_acp.names import PREFIX

__all__ = ["AcpProvider"]

_log = logging.getLogger("dsh_subagent_acp")

ABORTED_BEFORE_START = f"{PREFIX}: request was aborted before the ACP agent started"


def _start_error(failure: AcpFailure, rollback: AcpFailure | None = None) -> ProductStartError:
    message = failure.message()
    if rollback is not None:
        message = f"{message}; {rollback.message()}"
    return ProductStartError(message, rollback_failed=rollback is not None)


def _require_asyncio() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise _start_error(AcpFailure("initialize", "unsupported-backend")) from None


class AcpProvider(OutOfProcessProvider[AcpConfig]):
    """A named instance delegating to the ACP agent started by ``command + args``.

    Each run is its own agent process, ACP session and model: the process is spawned
    and owned by dsh-subprocess in the resolved working directory, ``initialize`` and
    ``session/new`` run before publication, and the one ``session/prompt`` runs after.
    Constructing the provider starts nothing.

    The ``acp`` library this provider is built on is asyncio-only, so ``start()`` fails
    with category ``unsupported-backend`` under trio.

    Args:
        config: The validated instance configuration.
    """

    Config: ClassVar[type[AcpConfig]] = AcpConfig

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        """Start the agent, open its session and publish the run.

        Raises:
            SubagentError: ``INVALID_REQUEST`` for an empty, non-text or blank task;
                ``NO_WORKING_DIRECTORY`` when no usable cwd exists. Both before any spawn.
            ProductStartError: The start failed or was cancelled; nothing is left
                running. The message is the safe line (or the fixed "aborted" text).
        """
        config = self._config
        texts = one_shot_task_texts(PREFIX, request.prompt)
        _require_asyncio()
        cwd = _resolve_cwd(config, request)
        if request.cancel.aborted:
            raise ProductStartError(ABORTED_BEFORE_START)
        spec = SpawnSpec(
            argv=(config.command, *config.args),
            cwd=cwd,
            env=dict(config.env),
            stdin="pipe",
            stdout="pipe",
            # Forwarded unchanged to the host's stderr, never read or classified.
            stderr="inherit",
            grace=config.dispose_grace,
        )
        try:
            proc = await spawn(spec)
        except SpawnError as exc:
            raise _start_error(AcpFailure("initialize", "spawn-failed")) from exc

        child = AcpChild(config, proc)
        startup = anyio.CancelScope()
        remove_startup = request.cancel.add_listener(lambda _reason: startup.cancel())
        if request.cancel.reason is not None:  # aborted while spawning
            startup.cancel()
        try:
            with startup:
                await child.initialize()
                await child.new_session(cwd)
        except BaseException as exc:
            remove_startup()
            rollback = await _rollback(child)
            if isinstance(exc, AcpFailure):
                raise _start_error(exc, rollback) from exc
            if isinstance(exc, Exception):
                raise _start_error(AcpFailure("initialize", "unknown"), rollback) from exc
            raise
        remove_startup()
        if startup.cancel_called:
            rollback = await _rollback(child)
            if rollback is not None:
                raise ProductStartError(
                    f"{ABORTED_BEFORE_START}; {rollback.message()}", rollback_failed=True
                )
            raise ProductStartError(ABORTED_BEFORE_START)
        return self._publish(request, child, texts)

    def _publish(
        self, request: ResolvedSubagentStartRequest, child: AcpChild, texts: list[str]
    ) -> SubprocessRunHandle:
        local = LocalCancellation()
        remove = request.cancel.add_listener(local.request_cancel)
        if request.cancel.aborted:
            local.request_cancel()
        handle = SubprocessRunHandle(
            request_cancel=local.request_cancel,
            teardown=child.dispose,
            remove_cancel_listener=remove,
        )
        name = self.name

        def on_error(error: Exception, stop_reason: str) -> None:
            _log.warning('%s "%s": child run failed (%s): %s', PREFIX, name, stop_reason, error)

        async def settle() -> SubagentResult:
            result = await settle_run_result(
                lambda: child.prompt(texts),
                local=local,
                collect_output=child.output,
                collect_diagnostic=child.diagnostic,
                on_error=on_error,
                remove_cancel_listener=remove,
            )
            handle.set_result(result)
            if local.cancelled:
                # Settled ``aborted`` already; now ask the agent to stop its turn.
                await child.send_cancel()
            return result

        request.task_group.start_soon(handle.drive, settle)
        return handle


def _resolve_cwd(config: AcpConfig, request: ResolvedSubagentStartRequest) -> str:
    try:
        return resolve_child_cwd(PREFIX, config.cwd, request.parent.cwd)
    except SubagentError as exc:
        if config.cwd is None and request.parent.cwd is None:
            raise  # the fixed "no working directory" message names no path
        # The probe message names the parent's path; keep it on the cause only.
        raise SubagentError(
            SubagentErrorCode.NO_WORKING_DIRECTORY,
            f"{PREFIX}: parent session cwd is not an absolute, accessible directory",
        ) from exc


async def _rollback(child: AcpChild) -> AcpFailure | None:
    with anyio.CancelScope(shield=True):
        try:
            await child.shutdown()
        except AcpFailure as failure:
            return failure
    return None
