"""The Codex provider: one fresh app-server process and one ephemeral thread per run.

Start (before publication, in the caller's task): validate the task → resolve the cwd
→ spawn the pinned binary → ``initialize`` → ``initialized`` → ``thread/start``
(``ephemeral: true``, optional model, the mode's fields). Any failure rolls back (close
the wire, terminate the tree, wait for its exit) and raises with the fixed stage line.

Published run (in the service task group): exactly one ``turn/start``, then frames
until ``turn/completed``. Disposal interrupts a known turn, ends stdin and terminates
the whole tree through :class:`dsh_subprocess.ManagedProcess`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import ClassVar, Final, NoReturn, TypeVar

import anyio
from dsh_subagent import (
    LocalCancellation,
    OutOfProcessProvider,
    ProductFailure,
    ProductStartError,
    ProductTeardownError,
    ResolvedSubagentStartRequest,
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubprocessRunHandle,
    format_product_failure,
    one_shot_task_texts,
    resolve_child_cwd,
    settle_run_result,
)
from dsh_subprocess import ExitFacts, ManagedProcess, SpawnSpec, StderrObserver, spawn
from pydantic import ValidationError

from dsh_subagent_codex.binary import codex_app_server_argv
from dsh_subagent_codex.config import PREFIX, CodexConfig
from dsh_subagent_codex.errors import CodexFailure, CodexProtocolError, CodexTransportClosed
from dsh_subagent_codex.first_start import FIRST_STARTS, FirstStartPass, effective_codex_home
from dsh_subagent_codex.jsonrpc import Frame, JsonRpcLines
from dsh_subagent_codex.permissions import mode_thread_fields
from dsh_subagent_codex.protocol import InitializeParams, ThreadStartParams, ThreadStartResult
from dsh_subagent_codex.turn import PRODUCT, TurnDriver, answer_unexpected

__all__ = ["CodexProvider"]

_log = logging.getLogger("dsh_subagent_codex")

_ABORTED_BEFORE_STARTUP: Final = f"{PREFIX}: request was aborted before app-server startup"
_ABORTED_BEFORE_PUBLICATION: Final = f"{PREFIX}: request was aborted before run publication"

T = TypeVar("T")


def _with_exit(failure: ProductFailure, facts: ExitFacts | None) -> ProductFailure:
    if facts is None:
        return failure
    return ProductFailure(
        failure.product,
        failure.stage,
        failure.category,
        failure.http_status,
        facts.exit_code,
        facts.signal,
    )


def _message(failure: ProductFailure) -> str:
    return f"{PREFIX}: {format_product_failure(failure)}"


class _ProcessGone(Exception):
    """The app-server exited while its output stayed open (a descendant holds it)."""


class _Child:
    """The app-server process and its wire, shared by startup and the published run.

    The wire reads :meth:`ManagedProcess.stdout_until_exit`: frames written before the
    exit still win, and ``grace`` seconds after the exit the output ends even while a
    descendant holds it open.
    """

    def __init__(self, proc: ManagedProcess, grace: float) -> None:
        assert proc.stdin is not None
        self.proc = proc
        self.stdout = proc.stdout_until_exit(grace)
        self.rpc = JsonRpcLines(proc.stdin, self.stdout)
        self.grace = grace

    async def guarded(self, body: Callable[[], Awaitable[T]]) -> T:
        """Run ``body`` (which reads the wire); an output cut short by the exit is named.

        Raises:
            _ProcessGone: The app-server exited and its output stayed open past ``grace``.
        """
        try:
            return await body()
        except CodexTransportClosed as exc:
            if self.stdout.ended_by_exit:
                raise _ProcessGone("app-server exited with its output still open") from exc
            raise

    async def exit_facts_after_eof(self) -> ExitFacts | None:
        """The exit facts once the output ended: wait up to ``grace`` for the exit."""
        facts = self.proc.exit_facts
        if facts is None and self.rpc.eof:
            with anyio.move_on_after(self.grace):
                facts = await self.proc.wait()
        return facts

    async def release(self) -> None:
        """Close the wire (stdin EOF), terminate the tree and wait for its exit."""
        await self.rpc.close()
        try:
            await self.proc.terminate()
        finally:
            self.proc.detach_stderr_observer()


async def _await_response(child: _Child, request_id: str) -> Frame:
    """Read until the response to ``request_id``; refuse any server request meanwhile."""
    while True:
        frame = await child.rpc.next_frame()
        if frame.is_response and frame.id == request_id:
            return frame
        if frame.is_request:
            await answer_unexpected(child.rpc, frame)


class CodexProvider(OutOfProcessProvider[CodexConfig]):
    """Delegates one self-contained text task to the real Codex app-server.

    Args:
        config: This instance's validated configuration. Constructing starts nothing.
    """

    Config: ClassVar[type[CodexConfig]] = CodexConfig

    # Seams for the package tests (a scripted fake app-server, a stderr probe).
    # Production always runs the pinned binary and forwards stderr to the host.

    def _argv(self) -> Sequence[str]:
        return codex_app_server_argv()

    def _stderr_observer(self) -> StderrObserver | None:
        return None

    # -- start -----------------------------------------------------------------------------

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Start the app-server and an ephemeral thread, then publish the run.

        Raises:
            SubagentError: Invalid task or no working directory (nothing started).
            ProductStartError: Startup failed or was cancelled; everything started was
                rolled back first. The message is the fixed safe line.
        """
        config = self._config
        try:
            cwd = resolve_child_cwd(PREFIX, config.cwd, request.parent.cwd)
        except SubagentError as exc:
            if request.cancel.aborted:
                raise ProductStartError(_ABORTED_BEFORE_STARTUP) from exc
            if request.parent.cwd is None:
                raise  # "no working directory": a fixed message without any path
            # The probe's message names the path: keep it on the cause chain only.
            raise ProductStartError(
                _message(ProductFailure(PRODUCT, "initialize", "unknown"))
            ) from exc
        texts = one_shot_task_texts(PREFIX, request.prompt)
        if request.cancel.aborted:
            raise ProductStartError(_ABORTED_BEFORE_STARTUP)
        first = await self._first_start_pass(cwd, request)

        try:
            argv = tuple(self._argv())
            spec = SpawnSpec(
                argv=argv,
                cwd=cwd,
                env=dict(config.env),
                stdin="pipe",
                stdout="pipe",
                stderr="pipe",
                grace=config.dispose_grace,
            )
            observer = self._stderr_observer()
            if observer is None:
                proc = await spawn(spec)
            else:
                proc = await spawn(spec, stderr_observer=observer)
        except BaseException as exc:
            first.release()
            if not isinstance(exc, Exception):
                raise
            raise ProductStartError(
                _message(ProductFailure(PRODUCT, "initialize", "unknown"))
            ) from exc
        assert proc.stdin is not None
        assert proc.stdout is not None
        child = _Child(proc, config.dispose_grace)

        state = _Startup(first)
        startup = anyio.CancelScope()
        remove_listener = request.cancel.add_listener(lambda _reason: startup.cancel())
        try:
            with startup:
                thread_id = await child.guarded(lambda: self._handshake(child, cwd, state))
            if startup.cancelled_caught or request.cancel.aborted:
                raise _Cancelled
        except BaseException as exc:
            remove_listener()
            try:
                await self._roll_back(child, exc, state.stage, request)
            finally:
                first.release()  # only after the failed tree has exited
        return self._publish(request, child, thread_id, texts, remove_listener)

    async def _first_start_pass(
        self, cwd: str, request: ResolvedSubagentStartRequest
    ) -> FirstStartPass:
        """Wait, cancellably by the request, until this start may spawn (first_start.py)."""
        key = effective_codex_home(self._config.env, cwd)
        with anyio.CancelScope() as scope:
            remove = request.cancel.add_listener(lambda _reason: scope.cancel())
            try:
                if not request.cancel.aborted:
                    return await FIRST_STARTS.acquire(key)
            finally:
                remove()
        raise ProductStartError(_ABORTED_BEFORE_STARTUP)

    async def _handshake(self, child: _Child, cwd: str, state: _Startup) -> str:
        rpc = child.rpc
        init_id = await rpc.send_request("initialize", InitializeParams().model_dump(mode="json"))
        response = await _await_response(child, init_id)
        if response.error is not None or not isinstance(response.result, dict):
            raise CodexProtocolError("app-server returned invalid initialize response")
        state.first.initialized()
        await rpc.notify("initialized")
        state.stage = "thread-start"
        params = ThreadStartParams(
            cwd=cwd, model=self._config.model, **mode_thread_fields(self._config.permission_mode)
        )
        thread_id = await rpc.send_request(
            "thread/start", params.model_dump(mode="json", exclude_none=True)
        )
        response = await _await_response(child, thread_id)
        if response.error is not None:
            raise CodexProtocolError("app-server rejected thread/start")
        try:
            thread = ThreadStartResult.model_validate(response.result).thread
        except ValidationError as exc:
            raise CodexProtocolError(
                "app-server returned an invalid thread/start response"
            ) from exc
        if thread.ephemeral is not True:
            raise CodexProtocolError("app-server did not create an ephemeral thread")
        return thread.id

    async def _roll_back(
        self,
        child: _Child,
        error: BaseException,
        stage: str,
        request: ResolvedSubagentStartRequest,
    ) -> NoReturn:
        with anyio.CancelScope(shield=True):
            facts: ExitFacts | None = None
            if isinstance(error, Exception) and not isinstance(error, _Cancelled):
                facts = await child.exit_facts_after_eof()
            startup = _with_exit(ProductFailure(PRODUCT, stage, "unknown"), facts)
            try:
                await child.release()
            except Exception as teardown_exc:
                teardown = _with_exit(
                    ProductFailure(PRODUCT, "teardown", "unknown"), child.proc.exit_facts
                )
                raise ProductStartError(
                    f"{_message(startup)}; {_message(teardown)}", rollback_failed=True
                ) from BaseExceptionGroup("startup and rollback failed", [error, teardown_exc])
        if not isinstance(error, Exception):
            raise error  # the caller's own cancellation propagates after the rollback
        if isinstance(error, _Cancelled) or request.cancel.aborted:
            raise ProductStartError(_ABORTED_BEFORE_PUBLICATION) from error
        raise ProductStartError(_message(startup)) from error

    # -- publication -----------------------------------------------------------------------

    def _publish(
        self,
        request: ResolvedSubagentStartRequest,
        child: _Child,
        thread_id: str,
        texts: list[str],
        remove_startup_listener: Callable[[], None],
    ) -> SubagentRun:
        remove_startup_listener()
        local = LocalCancellation()
        driver = TurnDriver(child.rpc, thread_id, self._config.permission_mode)
        remove_listener = request.cancel.add_listener(local.request_cancel)

        async def teardown() -> None:
            await driver.interrupt()
            try:
                await child.release()
            except Exception as exc:
                failure = _with_exit(
                    ProductFailure(PRODUCT, "teardown", "unknown"), child.proc.exit_facts
                )
                raise ProductTeardownError(_message(failure)) from exc

        handle = SubprocessRunHandle(
            request_cancel=local.request_cancel,
            teardown=teardown,
            remove_cancel_listener=remove_listener,
        )

        async def attempt() -> SubagentResult:
            return await self._attempt(child, driver, texts)

        def diagnostic() -> str | None:
            failure = driver.facts.failure or ProductFailure(PRODUCT, driver.stage, "unknown")
            fact = driver.facts.permission
            return format_product_failure(
                failure, fact.render(self._config.permission_mode) if fact else None
            )

        def on_error(error: Exception, stop_reason: str) -> None:
            _log.warning(
                'subagent-codex "%s": child run failed (%s): %s',
                self.name,
                stop_reason,
                _message(driver.facts.failure or ProductFailure(PRODUCT, driver.stage, "unknown")),
            )

        async def settle() -> SubagentResult:
            result = await settle_run_result(
                attempt,
                local=local,
                collect_output=driver.answers.output,
                collect_diagnostic=diagnostic,
                on_error=on_error,
                remove_cancel_listener=remove_listener,
            )
            if local.cancelled:
                handle.set_result(result)  # the result does not wait for the interrupt
                with anyio.CancelScope(shield=True):
                    await driver.interrupt()
            return result

        if request.cancel.aborted:
            local.request_cancel()
        request.task_group.start_soon(handle.drive, settle)
        return handle

    async def _attempt(self, child: _Child, driver: TurnDriver, texts: list[str]) -> SubagentResult:
        try:
            result = await child.guarded(lambda: driver.run(texts))
        except CodexFailure as exc:
            driver.facts.failure = _with_exit(exc.failure, child.proc.exit_facts)
            raise
        except (CodexTransportClosed, _ProcessGone) as exc:
            facts = await child.exit_facts_after_eof()
            if facts is not None:
                driver.facts.failure = _with_exit(
                    ProductFailure(PRODUCT, "process", "process-exit"), facts
                )
            else:
                driver.facts.failure = ProductFailure(PRODUCT, driver.stage, "unknown")
            raise CodexFailure(driver.facts.failure) from exc
        except Exception:
            driver.facts.failure = _with_exit(
                ProductFailure(PRODUCT, driver.stage, "unknown"), child.proc.exit_facts
            )
            raise
        if result.stop_reason != "completed":
            failure = _with_exit(
                driver.facts.failure or ProductFailure(PRODUCT, "turn", "unknown"),
                child.proc.exit_facts,
            )
            fact = driver.facts.permission
            diagnostic = format_product_failure(
                failure, fact.render(self._config.permission_mode) if fact else None
            )
            result = result.model_copy(update={"diagnostic": diagnostic})
        return result


class _Cancelled(Exception):
    """Local marker: the request's cancel signal fired during startup."""


class _Startup:
    """Which startup stage a failure belongs to (derived at the failure site), and the
    first-start pass that a successful ``initialize`` redeems."""

    __slots__ = ("first", "stage")

    def __init__(self, first: FirstStartPass) -> None:
        self.first = first
        self.stage = "initialize"
