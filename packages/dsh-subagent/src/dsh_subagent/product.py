"""The provider runtime: the delegation lifecycle, once, around a product's own protocol.

:class:`ProductProvider` owns everything that must be right for every product and that
no product author should write again:

* a request aborted before ``start()`` raises :class:`~dsh_subagent.StartCancelledError`
  and starts nothing (``settlement:cancel-before-start``); an empty or non-text task is
  refused before any spawn;
* the working directory: the configured override, else the parent session's cwd, else
  the loud "no working directory" failure (``cwd:*``), and never a path in a message;
* the spawn through dsh-subprocess with the configured env overlay and grace, stderr
  logged line by line on the ``dsh.product.<product>`` logger and never parsed;
* startup under a cancel scope tied to the request; on any failure or cancellation a
  shielded rollback to whole-tree exit, then one start error with the fixed safe line;
* publication, local cancellation, settlement that never raises, the bounded diagnostic
  (``diagnostic:*``), with the product's exit facts merged in by the one rule below;
* ``interrupt()`` at most once when a run is stopped early, then a memoized teardown to
  whole-tree exit (``quiescence:*``);
* continuation (``continuation:*``), for a provider whose :attr:`offers_continuation` is
  true: the ``continuation`` capability, the refusal of a handle of another instance or
  product (and of a session :meth:`has_session` or ``open()`` says the product lacks)
  with the fixed line, and the handle on the result of every finished turn.

Exit facts (exit code, signal) join a diagnostic only when the product's exit is part of
the failure: a start failure (whatever exit was observed before the rollback), a
published failure that is the product's exit (the wire ended, or the provider raised it
with ``exited=True``: the product ended before a terminal outcome or its exit status
failed; ``process-exit`` implies it) and a teardown failure. A product that reported its
failure itself (an error result, a failed turn) and then exited because the run was over
gets the line without them: "error ...; exit code: 0" would read as a contradiction, and
the exit adds nothing to what the product said.

A provider supplies only its product: :meth:`~ProductProvider.launch`,
:meth:`~ProductProvider.open` (the handshake), :meth:`~ProductProvider.run` (the task to a
result) and optionally :meth:`~ProductProvider.interrupt`. See docs/providers.md.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Generic, NoReturn, TypeVar

import anyio
from dsh_subprocess import ManagedProcess, SpawnError, SpawnSpec, StderrObserver, spawn

from dsh_subagent.budget import BudgetClock, EffectiveBudget
from dsh_subagent.config_fields import ProductConfig
from dsh_subagent.confinement import (
    ProductReach,
    RunScratch,
    check_confinement,
    default_reach,
    make_product_homes,
    run_policy,
)
from dsh_subagent.continuation import (
    ContinuationHandle,
    handle_for,
    session_to_continue,
)
from dsh_subagent.diagnostics import ProductFailure, format_product_failure
from dsh_subagent.errors import (
    ProductFailureError,
    ProductStartError,
    ProductTeardownError,
    StartCancelledError,
    SubagentError,
    SubagentErrorCode,
)
from dsh_subagent.lines import (
    DEFAULT_MAX_LINE_BYTES,
    MalformedLinePolicy,
)
from dsh_subagent.observe import report_stage
from dsh_subagent.product_child import RESPONSE_TIMEOUT, Launch, ProductChild, failure_of
from dsh_subagent.product_output import ProductOutputHooks
from dsh_subagent.product_ready import ProductReadyHooks, claim_ready, publish_claimed
from dsh_subagent.product_rollback import Cancelled, roll_back
from dsh_subagent.product_stderr import stderr_logger
from dsh_subagent.progress import ProgressStream
from dsh_subagent.provider_base import OutOfProcessProvider
from dsh_subagent.publication import Once, RunState, publish_run
from dsh_subagent.structured import output_json_schema
from dsh_subagent.task import one_shot_task_texts
from dsh_subagent.types import (
    COMPLETED,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentResult,
    SubagentRun,
    TextBlock,
)
from dsh_subagent.workdir import resolve_child_cwd

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from pydantic import BaseModel, JsonValue

    OutputSchema = Mapping[str, JsonValue] | type[BaseModel]

__all__ = ["ProductProvider"]

ConfigT = TypeVar("ConfigT", bound=ProductConfig)

_log = logging.getLogger("dsh_subagent")


class ProductProvider(
    ProductOutputHooks, ProductReadyHooks, OutOfProcessProvider[ConfigT], Generic[ConfigT]
):
    """Base of a provider that runs one product process per delegation.

    Subclass it with a :class:`~dsh_subagent.ProductConfig` subclass and implement the
    product's protocol in the hooks; the base runs the lifecycle around them::

        class EchoProvider(ProductProvider[EchoConfig]):
            Config = EchoConfig
            product = "Echo"

            def launch(self, cwd: str) -> Launch:
                return Launch(argv=(sys.executable, "-m", "echo_agent"))

            async def run(self, child: ProductChild) -> str:
                await child.send_json({"task": child.task})
                reply = await child.receive_json()
                ...

    Class attributes:
        product: Display name in every diagnostic line (``product: <product>``).
        open_stage / run_stage: The stage names of the two phases (diagnostics).
        max_line_bytes: The longest stdout line accepted (the bounded line reader).
        malformed_lines: ``"skip"`` or ``"fail"`` for a stdout line that is not JSON.
        exit_drain: Seconds stdout is still read after the product exited (1 s).
        max_task_chars: The product's input limit in characters, or ``None``.

    Override the :attr:`eof_grace` property for a product that may exit by itself once
    its stdin is closed.
    """

    product: ClassVar[str]
    open_stage: ClassVar[str] = "initialize"
    run_stage: ClassVar[str] = "turn"
    max_line_bytes: ClassVar[int] = DEFAULT_MAX_LINE_BYTES
    exit_drain: ClassVar[float] = 1.0
    """Seconds stdout is still read after the product exited while something else (a
    ``setsid`` tool process) holds it open; what the product wrote is in the pipe by then."""
    malformed_lines: ClassVar[MalformedLinePolicy] = "fail"
    max_task_chars: ClassVar[int | None] = None
    """The product's input limit: the most characters (Unicode code points) its task may
    have, all text blocks together. A longer task is refused before anything starts
    (``INVALID_REQUEST`` naming the length and the limit, never the text); ``None``: no
    known limit."""

    # -- the hooks a provider implements -----------------------------------------------

    def launch(self, cwd: str) -> Launch:
        """How to start the product in ``cwd``: argv and product-specific env. No I/O.

        An exception here fails the start at stage ``launch``; nothing was spawned.
        """
        raise NotImplementedError

    async def open(self, child: ProductChild) -> None:
        """The handshake, before the run is published (stage ``open_stage``).

        Cancelled when the request's cancel signal fires; the runtime then rolls the
        child back and raises :class:`~dsh_subagent.StartCancelledError`. Raise
        ``child.fail(...)`` for a product failure; the end of stdout is reported as the
        product's exit. The default does nothing (a product with no handshake).
        """

    async def run(self, child: ProductChild) -> SubagentResult | str:
        """Drive the task to the product's answer (stage ``run_stage``).

        Return the answer text (the run completes with it) or a full
        :class:`~dsh_subagent.SubagentResult` (``max-tokens``, ``refusal``, ...). Raise
        ``child.fail(...)`` for a product failure; any other exception settles ``error``
        with category ``unknown``. Append assistant text to ``child.output`` as it
        arrives so a cancelled or failed run keeps it as partial output. Cancelled at
        once when the run is cancelled locally.
        """
        raise NotImplementedError

    async def interrupt(self, child: ProductChild) -> None:
        """Ask the product to stop a run that is being cancelled (optional).

        Called at most once per run, shielded and bounded by ``dispose_grace``, after a
        cancelled run settled ``aborted`` or before the teardown of a run that had not
        finished. The process tree is terminated afterwards whatever happens here.
        """

    def admission(self, cwd: str) -> AbstractAsyncContextManager[object] | None:
        """An optional gate entered before the spawn and left once ``open()`` succeeded or
        the failed start was rolled back (e.g. one first start per product home at a time).

        Entering it is cancelled by the request's cancel signal. What it yields is
        :attr:`ProductChild.admission`.
        """
        return None

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        """Start ``spec`` (a seam for tests; the default is :func:`dsh_subprocess.spawn`)."""
        return await spawn(spec, stderr_observer=stderr_observer)

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        """What the product needs beyond the system when confined (docs/security.md).

        ``env`` is the run's overlay (``launch.env`` under the instance's ``env``). No I/O
        beyond reading the product's configuration. The
        default: the launched program's installation and the ports of the overlay's
        ``*_BASE_URL`` variables. A provider adds its product's home and endpoints.
        """
        return default_reach(launch.argv, env)

    @property
    def eof_grace(self) -> float:
        """Seconds the product's tree may take to exit by itself after stdin is closed.

        Teardown (and the rollback of a failed start) closes stdin, waits up to this long
        for the whole tree to exit, then terminates it. The default ``0`` terminates at
        once: most products ignore EOF, and waiting would only delay every dispose.
        """
        return 0.0

    @property
    def honours_budgets(self) -> bool:
        """``True``: the runtime enforces the deadline and the idle timeout."""
        return True

    # -- continuation (optional) --------------------------------------------------------

    @property
    def offers_continuation(self) -> bool:
        """Whether this instance continues sessions (``False`` by default).

        A provider returns ``True`` (typically from its configuration) only when its
        product keeps the session after the run and ``open()`` honours
        :attr:`ProductChild.resume`; the runtime then declares the ``continuation``
        capability and puts a handle on each finished turn's result.
        """
        return False

    @property
    def capabilities(self) -> SubagentCapabilities:
        """``continuation`` and ``output_schema`` as the instance offers them; nothing else."""
        return SubagentCapabilities(
            output_schema=self.enforces_output_schema, continuation=self.offers_continuation
        )

    def launch_continuation(self, cwd: str, session: str) -> Launch:
        """How to start the product to continue ``session`` (default: :meth:`launch`, for
        a product that loads the session over its protocol in ``open()``)."""
        del session
        return self.launch(cwd)

    def has_session(self, session: str, cwd: str) -> bool:
        """Whether the product still has ``session`` for a run in ``cwd``, checked before
        the spawn (no I/O beyond a file lookup). The default ``True`` leaves the check to
        ``open()``, which raises ``child.fail(CONTINUATION_UNAVAILABLE_CATEGORY)``."""
        del session, cwd
        return True

    @property
    def product_slug(self) -> str:
        """The product's name in continuation handles (``codex``, ``claude-code``, ...)."""
        return re.sub(r"[^a-z0-9]+", "-", self.product.lower()).strip("-")

    # -- naming -------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """The prefix of this provider's messages, ``subagent-<product>``."""
        return f"subagent-{self.product_slug}"

    def _line(self, failure: ProductFailure, detail: str | None = None) -> str:
        return f"{self.prefix}: {format_product_failure(failure, detail)}"

    # -- start --------------------------------------------------------------------------

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Start the product, run its handshake and publish the run.

        Raises:
            StartCancelledError: The request was aborted before or during startup;
                whatever had started was rolled back to whole-tree exit.
            SubagentError: ``INVALID_REQUEST`` for an empty, non-text or blank task, or
                one longer than :attr:`max_task_chars`;
                ``NO_WORKING_DIRECTORY`` when no usable cwd exists. Nothing started.
            ProductStartError: Startup failed; everything started was rolled back. The
                message is the fixed safe line; the cause stays on ``__cause__``.
        """
        if request.cancel.aborted:
            raise StartCancelledError(self._cancelled_message())
        clock = BudgetClock(
            EffectiveBudget.of(
                self.config.deadline_seconds, self.config.idle_timeout_seconds, request.budget
            )
        )
        texts = one_shot_task_texts(self.prefix, request.prompt)
        self._check_task_length(texts)
        cwd = self._resolve_cwd(request)
        check_confinement(self.prefix, self.config.confinement)
        resume = session_to_continue(
            request.resume,
            offers=self.offers_continuation,
            provider=self.name,
            product=self.product_slug,
            has_session=lambda session: self.has_session(session, cwd),
        )
        report_stage("launch")
        # A ready product was spawned for no particular answer shape: a typed delegation
        # (whose launch may carry the schema) always starts cold.
        if resume is None and request.output_schema is None:
            claimed = claim_ready(self, (cwd, request.progress_commands))
            if claimed is not None:
                return await publish_claimed(self, request, claimed, texts, clock)
        spec, scratch = self._spawn_spec(cwd, resume, request.output_schema)
        run_id = str(uuid.uuid4())
        try:
            child = await self._start_child(request, spec, cwd, run_id, texts, clock, resume)
        except BaseException:
            scratch.remove()  # the rollback ended the whole tree
            raise
        child.scratch = scratch
        return self._publish(request, child, clock)

    def _spawn_spec(
        self, cwd: str, resume: str | None, output_schema: OutputSchema | None = None
    ) -> tuple[SpawnSpec, RunScratch]:
        """The spawn of one product tree in ``cwd`` (a cold start's and a ready one's)."""
        scratch = RunScratch(None)
        try:
            launch = self.launch(cwd) if resume is None else self.launch_continuation(cwd, resume)
            if output_schema is not None:
                schema = output_json_schema(output_schema)
                launch = self.launch_structured(launch, cwd, resume, schema)
            env = {**launch.env, **self.config.env}
            scratch = RunScratch.make(self.config.confinement, env)
            env.update(scratch.env)
            reach = self.confinement_reach(launch, env, cwd)
            make_product_homes(self.config.confinement, reach)
            spec = SpawnSpec(
                argv=tuple(launch.argv),
                cwd=cwd,
                env=env,
                stdin="pipe",
                stdout="pipe",
                stderr="pipe",
                grace=self.config.dispose_grace,
                confinement=run_policy(self.config.confinement, reach, cwd=cwd, env=env),
            )
        except Exception as exc:
            scratch.remove()
            raise ProductStartError(
                self._line(ProductFailure(self.product, "launch", "unknown"))
            ) from exc
        return spec, scratch

    def _check_task_length(self, texts: list[str]) -> None:
        limit = self.max_task_chars
        length = sum(len(text) for text in texts)
        if limit is not None and length > limit:
            raise SubagentError(
                SubagentErrorCode.INVALID_REQUEST,
                f"{self.prefix}: the task is {length:,} characters; {self.product} accepts at "
                f"most {limit:,} (its input limit): shorten it or pass the content as a file",
            )

    def _cancelled_message(self) -> str:
        return f"{self.prefix}: the request was cancelled before the run was published"

    def _resolve_cwd(self, request: ResolvedSubagentStartRequest) -> str:
        return resolve_child_cwd(self.prefix, self.config.cwd, request.parent.cwd)

    async def _start_child(
        self,
        request: ResolvedSubagentStartRequest,
        spec: SpawnSpec,
        cwd: str,
        run_id: str,
        texts: list[str],
        clock: BudgetClock,
        resume: str | None,
    ) -> ProductChild:
        startup = anyio.CancelScope()
        budget = clock.scope()
        remove = request.cancel.add_listener(lambda _reason: startup.cancel())
        gate = contextlib.AsyncExitStack()
        child: ProductChild | None = None
        try:
            try:
                with startup, budget:
                    manager = self.admission(cwd)
                    admission = None
                    if manager is not None:
                        admission = await gate.enter_async_context(manager)
                    if request.cancel.aborted:
                        raise Cancelled
                    report_stage("spawn")
                    with anyio.CancelScope(shield=True):  # a spawn is quick and atomic
                        process = await self._spawn(spec, run_id)
                    child = self._new_child(
                        process,
                        cwd,
                        run_id,
                        texts,
                        admission,
                        request.progress_commands,
                        resume,
                        output_schema=request.output_schema,
                    )
                    clock.attach(child.lines)
                    report_stage(self.open_stage)
                    await self.open(child)
                if budget.cancelled_caught and not request.cancel.aborted:
                    stage = child.stage if child is not None else "spawn"
                    raise ProductFailureError(ProductFailure(self.product, stage, clock.expired()))
                if startup.cancelled_caught or request.cancel.aborted:
                    raise Cancelled
            except BaseException as exc:
                await self._roll_back(child, exc, request)
        finally:
            remove()
            with anyio.CancelScope(shield=True):
                await gate.aclose()
        assert child is not None
        return child

    def _new_child(
        self,
        process: ManagedProcess,
        cwd: str,
        run_id: str,
        texts: list[str],
        admission: object,
        include_commands: bool,
        resume: str | None,
        output_schema: OutputSchema | None = None,
    ) -> ProductChild:
        return ProductChild(
            product=self.product,
            process=process,
            cwd=cwd,
            run_id=run_id,
            task_texts=texts,
            stage=self.open_stage,
            grace=self.config.dispose_grace,
            exit_drain=self.exit_drain,
            max_line_bytes=self.max_line_bytes,
            malformed=self.malformed_lines,
            admission=admission,
            progress=ProgressStream(),
            include_commands=include_commands,
            resume=resume,
            output_schema=output_schema,
            response_timeout=self.config.response_timeout_seconds,
        )

    async def _spawn(self, spec: SpawnSpec, run_id: str) -> ManagedProcess:
        try:
            return await self.spawn(spec, stderr_logger(self.product_slug, self.name, run_id))
        except (SpawnError, OSError) as exc:
            failure = ProductFailure(self.product, "spawn", "spawn-failed")
            raise ProductFailureError(failure) from exc

    async def _roll_back(
        self,
        child: ProductChild | None,
        error: BaseException,
        request: ResolvedSubagentStartRequest,
    ) -> NoReturn:
        await roll_back(self, child, error, request)

    # -- the published run --------------------------------------------------------------

    def _publish(
        self, request: ResolvedSubagentStartRequest, child: ProductChild, clock: BudgetClock
    ) -> SubagentRun:
        state = RunState()

        async def attempt() -> SubagentResult:
            child.stage = self.run_stage
            budget = clock.scope()
            outcome: SubagentResult | str | None = None
            try:
                with budget:
                    outcome = await self.run(child)
                if budget.cancelled_caught:
                    # A bound ran out: the whole tree is gone before the result is delivered.
                    # No exit facts: the exit is the runtime's own termination.
                    failure = ProductFailure(self.product, child.stage, clock.expired())
                    state.failure = (failure, child.detail)
                    with anyio.CancelScope(shield=True):
                        await interrupt()
                        await self._release(child)
                    raise ProductFailureError(failure)
            except Exception as exc:
                if state.failure is None:
                    state.failure = await failure_of(self.product, child, exc, publishing=True)
                if state.failure[0].category == RESPONSE_TIMEOUT:
                    # A product that never answered: the whole tree is gone before the
                    # result is delivered, as when a budget runs out.
                    with anyio.CancelScope(shield=True):
                        await self._release(child)
                raise
            assert outcome is not None
            state.finished = True
            if isinstance(outcome, str):
                outcome = SubagentResult(output=(TextBlock(text=outcome),), stop_reason=COMPLETED)
            handle = self._handle_of(child)
            if handle is not None:
                outcome = outcome.model_copy(update={"continuation": handle})
            return outcome

        def diagnostic() -> str | None:
            failure, detail = state.failure or (
                ProductFailure(self.product, child.stage, "unknown"),
                None,
            )
            return format_product_failure(failure, detail)

        def on_error(error: Exception, stop_reason: str) -> None:
            _log.warning(
                '%s "%s": run %s failed (%s): %s',
                self.prefix,
                self.name,
                child.run_id,
                stop_reason,
                diagnostic(),
            )

        interrupt = Once(lambda: self._interrupt_bounded(child))

        async def teardown() -> None:
            if not state.finished:
                await interrupt()
            try:
                await self._release(child)
            except Exception as exc:
                raise ProductTeardownError(self._teardown_line(child)) from exc

        return publish_run(
            request,
            attempt=attempt,
            teardown=teardown,
            collect_output=lambda: tuple(child.output),
            collect_diagnostic=diagnostic,
            on_error=on_error,
            after_cancel=interrupt,
            run_id=child.run_id,
            progress=child.progress,
        )

    def _handle_of(self, child: ProductChild) -> ContinuationHandle | None:
        if not self.offers_continuation or child.session_id is None:
            return None
        handle = handle_for(child.session_id, provider=self.name, product=self.product_slug)
        if handle is None:
            _log.info("%s: the product's session id cannot be a continuation", self.prefix)
        return handle

    async def _interrupt_bounded(self, child: ProductChild) -> None:
        with anyio.move_on_after(self.config.dispose_grace):
            try:
                await self.interrupt(child)
            except Exception:
                _log.debug("%s: interrupt raised; the tree is terminated anyway", self.prefix)

    def _teardown_line(self, child: ProductChild) -> str:
        return f"{self.prefix}: " + child.failure_line(
            ProductFailure(self.product, "teardown", "unknown")
        )

    async def _release(self, child: ProductChild) -> None:
        """End stdin, give the tree ``eof_grace`` to exit, terminate what is left and wait
        until none of it is alive."""
        try:
            await child.close_stdin()
            grace = self.eof_grace
            if grace > 0:
                with anyio.move_on_after(grace):
                    try:
                        await child.process.wait_tree_exit()
                    except Exception:  # terminate() below still ends the tree
                        _log.debug("%s: waiting for an exit on EOF failed", self.prefix)
            await child.process.terminate()
            child.scratch.remove()  # nothing of the tree is alive to use it
        finally:
            child.process.detach_stderr_observer()
            await self.release_state(child)
