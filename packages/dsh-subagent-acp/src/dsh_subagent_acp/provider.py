"""``AcpProvider``: delegate one task to any Agent Client Protocol agent."""

from __future__ import annotations

import asyncio  # noqa: TID251 - only to detect the backend the acp library requires
import dataclasses
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

from dsh_subagent import (
    Launch,
    MalformedLinePolicy,
    ProductChild,
    ProductFailure,
    ProductProvider,
    ProductReach,
    ProductStartError,
    ResolvedSubagentStartRequest,
    SubagentResult,
    SubagentRun,
    format_product_failure,
)

from dsh_subagent_acp.config import AcpConfig
from dsh_subagent_acp.first_start import FirstStartAlone
from dsh_subagent_acp.reach import agent_reach, free_loopback_port, served_port
from dsh_subagent_acp.session import AcpSession
from dsh_subagent_acp.transport import MAX_FRAME_BYTES

__all__ = ["AcpProvider"]


class AcpProvider(ProductProvider[AcpConfig]):
    """A named instance delegating to the ACP agent started by ``command + args``.

    Each run is its own agent process, ACP session and model: ``initialize`` and
    ``session/new`` run before publication, the one ``session/prompt`` after, and a run
    stopped early gets ``session/cancel``. The lifecycle around them (cwd, spawn,
    cancellation, settlement, whole-tree teardown) is :class:`~dsh_subagent.ProductProvider`'s.
    Constructing the provider starts nothing.

    The ``acp`` library this provider is built on is asyncio-only, so ``start()`` fails
    with category ``unsupported-backend`` under trio, before anything is spawned.

    Constructed as ``AcpProvider(config)`` with the validated instance configuration.
    """

    Config: ClassVar[type[AcpConfig]] = AcpConfig
    product: ClassVar[str] = "ACP"
    open_stage: ClassVar[str] = "initialize"
    offers_ready_starts: ClassVar[bool] = True
    run_stage: ClassVar[str] = "prompt"
    max_line_bytes: ClassVar[int] = MAX_FRAME_BYTES
    # Not JSON fails the run (``malformed-frame``): the library would skip it silently.
    malformed_lines: ClassVar[MalformedLinePolicy] = "fail"

    def __init__(self, config: AcpConfig) -> None:
        super().__init__(config)
        self._first_start = FirstStartAlone()

    @property
    def offers_continuation(self) -> bool:
        """The configured ``continuation`` (``session/load``, when the agent offers it)."""
        return self.config.continuation

    @property
    def eof_grace(self) -> float:
        """The configured ``dispose_eof_grace``."""
        return self.config.dispose_eof_grace

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """See :meth:`dsh_subagent.ProductProvider.start`.

        Raises:
            ProductStartError: Also when not running on asyncio (category
                ``unsupported-backend``); nothing is spawned then.
        """
        # Checked first: on a backend the library cannot run on, no request can start.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            failure = ProductFailure(self.product, "initialize", "unsupported-backend")
            raise ProductStartError(f"{self.prefix}: {format_product_failure(failure)}") from None
        return await super().start(request)

    def launch(self, cwd: str) -> Launch:
        """``command + args`` (and ``serve_port_arg PORT``, a free loopback port, when
        configured); the agent's own variables come from the ``env`` overlay."""
        argv: tuple[str, ...] = (self.config.command, *self.config.args)
        if self.config.serve_port_arg is not None:
            argv += (self.config.serve_port_arg, str(free_loopback_port()))
        return Launch(argv=argv)

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        """The agent's installation, runtime, home and endpoints (see :func:`agent_reach`),
        and the port it serves itself on (``serve_port_arg``)."""
        del cwd
        reach = agent_reach(launch.argv, env)
        port = served_port(launch.argv, self.config.serve_port_arg)
        return reach if port is None else dataclasses.replace(reach, bind_ports=(port,))

    def admission(self, cwd: str) -> AbstractAsyncContextManager[None]:
        """The instance's first start runs alone, until one opened (first_start.py)."""
        del cwd
        return self._first_start.passage()

    async def open(self, child: ProductChild) -> None:
        """``initialize`` (stage ``initialize``), then ``session/new`` (``session-new``) or,
        for a follow-up, ``session/load`` (``session-load``)."""
        session = child.state = AcpSession(child, self.config)
        await session.open(child.cwd)
        self._first_start.open_succeeded()

    async def run(self, child: ProductChild) -> SubagentResult:
        """The one ``session/prompt``, its ``stopReason`` mapped to the result."""
        return await _session(child).prompt()

    async def interrupt(self, child: ProductChild) -> None:
        """``session/cancel`` when the turn is still open."""
        await _session(child).cancel()


def _session(child: ProductChild) -> AcpSession:
    """The run's ACP session, which ``open()`` keeps in ``child.state``."""
    session = child.state
    assert isinstance(session, AcpSession)
    return session
