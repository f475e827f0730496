"""The Codex provider: one fresh app-server process and one ephemeral thread per run.

Only Codex's protocol lives here; the delegation lifecycle around it (task and cwd
checks, the spawn, rollback, publication, settlement, teardown to whole-tree exit) is
:class:`dsh_subagent.ProductProvider`'s.

* ``open()``: ``initialize`` → ``initialized`` → ``thread/start`` (``ephemeral: true``,
  optional model, the mode's fields); stages ``initialize`` and ``thread-start``. With
  ``continuation`` on, the thread is kept (``ephemeral: false``) and a follow-up run
  sends ``thread/resume`` instead (stage ``thread-resume``).
* ``run()``: exactly one ``turn/start`` (with the request's ``outputSchema`` when it
  has one), then frames until ``turn/completed``
  (:class:`~dsh_subagent_codex.turn.TurnDriver`); stages ``turn-start`` and ``turn``.
* ``interrupt()``: ``turn/interrupt`` of a known turn when a run is stopped early.
* ``admission()``: the first start per ``CODEX_HOME`` runs alone (first_start.py).

The responses to ``initialize``, ``thread/start`` and ``turn/start`` are each awaited
under the instance's ``response_timeout_seconds`` (``ProductChild.await_response``): an
app-server that cannot parse a request logs it and never answers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from typing import ClassVar, Final

from dsh_subagent import (
    CONTINUATION_UNAVAILABLE_CATEGORY,
    Launch,
    MalformedLinePolicy,
    ProductChild,
    ProductProvider,
    ProductReach,
    SubagentResult,
    confines_commands,
    default_reach,
)
from pydantic import ValidationError

from dsh_subagent_codex.binary import codex_app_server_argv, codex_package_dir
from dsh_subagent_codex.config import CodexConfig
from dsh_subagent_codex.errors import CodexProtocolError
from dsh_subagent_codex.first_start import (
    FIRST_STARTS,
    FirstStartPass,
    HomeKey,
    effective_codex_home,
)
from dsh_subagent_codex.home_config import codex_endpoint_ports, native_sandbox_mode
from dsh_subagent_codex.jsonrpc import Frame, JsonRpcLines
from dsh_subagent_codex.permissions import mode_thread_fields
from dsh_subagent_codex.protocol import (
    InitializeParams,
    ThreadResumeParams,
    ThreadStartParams,
    ThreadStartResult,
)
from dsh_subagent_codex.turn import PRODUCT, TurnDriver, answer_unexpected

__all__ = ["MAX_FRAME_BYTES", "MAX_TASK_CHARS", "CodexProvider"]

MAX_TASK_CHARS: Final = 1 << 20
"""1,048,576 characters: the app-server's input limit for one ``turn/start``, all text
inputs together (Unicode code points, not bytes). The pinned app-server rejects a longer
input (JSON-RPC ``-32602``, ``input_too_large``); the provider refuses such a task before
anything starts, naming its length and this limit."""

MAX_FRAME_BYTES: Final = 32 << 20
"""32 MiB: the longest app-server line accepted. A ``commandExecution`` item carries the
command's whole aggregated output (several MiB have been seen), so the bound sits well
above that and well below a memory problem; a longer line fails the run
(``line-too-long``) instead of growing the host's memory."""


@contextlib.asynccontextmanager
async def _first_start(home: HomeKey) -> AsyncIterator[FirstStartPass]:
    """Hold the home's first-start pass from before the spawn until the start settled.

    ``open()`` redeems the pass after a successful ``initialize``; a failed start only
    hands it on here, which the runtime reaches once the failed tree has exited.
    """
    first = await FIRST_STARTS.acquire(home)
    try:
        yield first
    finally:
        first.release()  # a no-op once initialize succeeded


async def _await_response(rpc: JsonRpcLines, request_id: str) -> Frame:
    """Read until the response to ``request_id``; refuse any server request meanwhile."""
    while True:
        frame = await rpc.next_frame()
        if frame.is_response and frame.id == request_id:
            return frame
        if frame.is_request:
            await answer_unexpected(rpc, frame)


def _with_package(package: str, paths: tuple[str, ...]) -> tuple[str, ...]:
    """``package``, then whichever of ``paths`` it does not already hold (a directory
    rule grants everything beneath it)."""
    inside = [p for p in paths if os.path.commonpath((package, os.path.realpath(p))) == package]
    return (package, *(p for p in paths if p not in inside))


def _driver(child: ProductChild) -> TurnDriver:
    driver = child.state
    assert isinstance(driver, TurnDriver), "open() sets the turn driver"
    return driver


class CodexProvider(ProductProvider[CodexConfig]):
    """Delegates one self-contained text task to the real Codex app-server.

    Constructed as ``CodexProvider(config)`` with this instance's validated configuration;
    constructing starts nothing.
    """

    Config: ClassVar[type[CodexConfig]] = CodexConfig
    product: ClassVar[str] = PRODUCT
    open_stage: ClassVar[str] = "initialize"
    offers_ready_starts: ClassVar[bool] = True
    run_stage: ClassVar[str] = "turn-start"
    max_line_bytes: ClassVar[int] = MAX_FRAME_BYTES
    max_task_chars: ClassVar[int | None] = MAX_TASK_CHARS
    # The app-server logs to stderr; a stray stdout line that is not JSON is not a frame.
    malformed_lines: ClassVar[MalformedLinePolicy] = "skip"

    @property
    def offers_continuation(self) -> bool:
        """The configured ``continuation`` (threads kept in a persistent ``CODEX_HOME``)."""
        return self.config.continuation

    @property
    def enforces_output_schema(self) -> bool:
        """``True``: the pinned app-server's ``turn/start`` takes an ``outputSchema``
        that constrains the turn's final message (the host validates it as well)."""
        return True

    def launch(self, cwd: str) -> Launch:
        """The pinned binary's app-server argv (a missing wheel fails at stage ``launch``)."""
        return Launch(argv=codex_app_server_argv())

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        """The pinned wheel's Codex package (read: ``bin/``, its manifest, the bundled
        ``rg`` its commands find first on ``PATH``, its resources), the effective
        ``CODEX_HOME`` (written: sessions, logs, its sqlite state), the ports of the model
        providers its ``config.toml`` names (443 when it selects the built-in OpenAI
        provider) and the pseudo-terminals it runs ``tty`` commands on.

        Confined, the kernel policy is Codex's command sandbox (see :meth:`open`), so the
        cwd is writable exactly when Codex's own sandbox would let commands write it: not
        in ``never`` mode under a ``read-only`` native ``sandbox_mode`` (the default).
        """
        base = default_reach(launch.argv, env)
        package = codex_package_dir(launch.argv[0])
        read = base.read if package is None else _with_package(package, base.read)
        home = str(effective_codex_home(env, cwd))
        sandbox = (
            native_sandbox_mode(home) if self.config.permission_mode == "never" else "writable"
        )
        return ProductReach(
            read=read,
            write=(home,),
            connect_ports=tuple(sorted({*base.connect_ports, *codex_endpoint_ports(home)})),
            cwd_writable=sandbox != "read-only",
            pseudo_terminals=True,  # exec_command with tty: true runs on a pty
        )

    def admission(self, cwd: str) -> contextlib.AbstractAsyncContextManager[FirstStartPass]:
        """One first start per effective ``CODEX_HOME`` at a time (see first_start.py)."""
        return _first_start(effective_codex_home(self.config.env, cwd))

    async def open(self, child: ProductChild) -> None:
        """``initialize`` → ``initialized`` → an ephemeral ``thread/start`` (a kept one with
        ``continuation``), or ``thread/resume`` of the thread the run continues."""
        rpc = JsonRpcLines(child)
        init_id = await rpc.send_request("initialize", InitializeParams().model_dump(mode="json"))
        response = await child.await_response(lambda: _await_response(rpc, init_id))
        if response.error is not None or not isinstance(response.result, dict):
            raise CodexProtocolError("app-server returned invalid initialize response")
        if isinstance(child.admission, FirstStartPass):
            child.admission.initialized()
        await rpc.notify("initialized")
        config = self.config
        fields = mode_thread_fields(config.permission_mode)
        if confines_commands(config.confinement):
            # Codex's own sandbox (bubblewrap) cannot start inside a Landlock domain (no
            # mounts, no uid map): the kernel policy around the whole tree is the sandbox.
            fields["sandbox"] = "danger-full-access"
        method = "thread/start"
        params: ThreadStartParams | ThreadResumeParams
        if child.resume is not None:
            child.stage = "thread-resume"
            method = "thread/resume"
            params = ThreadResumeParams(
                threadId=child.resume, cwd=child.cwd, model=config.model, **fields
            )
        else:
            child.stage = "thread-start"
            params = ThreadStartParams(
                cwd=child.cwd, model=config.model, ephemeral=not config.continuation, **fields
            )
        request_id = await rpc.send_request(
            method, params.model_dump(mode="json", exclude_none=True)
        )
        response = await child.await_response(lambda: _await_response(rpc, request_id))
        if response.error is not None:
            if child.resume is not None:
                # The home has no such thread (cleaned, never kept, another home).
                raise child.fail(CONTINUATION_UNAVAILABLE_CATEGORY)
            raise CodexProtocolError("app-server rejected thread/start")
        try:
            thread = ThreadStartResult.model_validate(response.result).thread
        except ValidationError as exc:
            raise CodexProtocolError(f"app-server returned an invalid {method} response") from exc
        if child.resume is not None and thread.id != child.resume:
            raise CodexProtocolError("app-server resumed another thread")
        if thread.ephemeral is config.continuation:
            raise CodexProtocolError(
                "app-server made the kept thread ephemeral"
                if config.continuation
                else "app-server did not create an ephemeral thread"
            )
        if config.continuation:
            child.session_id = thread.id
        child.state = TurnDriver(child, rpc, thread.id, config.permission_mode)

    async def run(self, child: ProductChild) -> SubagentResult:
        """Exactly one turn with the task's text blocks, to its terminal."""
        return await _driver(child).run()

    async def interrupt(self, child: ProductChild) -> None:
        """Best-effort ``turn/interrupt`` of the run's turn, once its id is known."""
        await _driver(child).interrupt()
