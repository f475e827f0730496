"""What a product provider's hooks are handed: one run's product process and its wire."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
from dsh_subprocess import ExitFacts, ManagedProcess
from pydantic import BaseModel, JsonValue

from dsh_subagent.config_fields import DEFAULT_RESPONSE_TIMEOUT
from dsh_subagent.confinement import RunScratch
from dsh_subagent.diagnostics import ProductFailure, format_product_failure
from dsh_subagent.errors import ProductFailureError
from dsh_subagent.lines import LineReader, LineTooLongError, MalformedLineError, MalformedLinePolicy
from dsh_subagent.progress import ProgressEvent, ProgressStream
from dsh_subagent.structured import output_json_schema
from dsh_subagent.types import ContentBlock

__all__ = ["RESPONSE_TIMEOUT", "Launch", "ProductChild", "failure_of"]

T = TypeVar("T")

RESPONSE_TIMEOUT: Final = "response-timeout"
"""The category of a request whose direct response did not come within the bound."""


@dataclass(frozen=True)
class Launch:
    """How to start the product for one run; built by ``launch()`` without any I/O.

    Attributes:
        argv: The program and its arguments (never shell-interpreted). Use an absolute
            path: a bare name is looked up on the child's ``PATH``.
        env: Product-specific variables. The instance's configured ``env`` overlay is
            layered on top of them (the user's explicit configuration wins), over the
            credential-scrubbed parent environment.
    """

    argv: Sequence[str]
    env: Mapping[str, str | None] = field(default_factory=dict)


class ProductChild:
    """One run's product process, its line wire and its failure facts.

    Built by :class:`~dsh_subagent.ProductProvider` after the spawn and passed to every
    hook. Read lines with :attr:`lines` (or :meth:`receive_json`), write with
    :meth:`send` / :meth:`send_json`; raise :meth:`fail` for a product failure.

    Attributes:
        process: The managed product process (its tree is the runtime's to end).
        cwd: The working directory the product runs in.
        run_id: The run's id (also on every product stderr log record).
        task_texts: The task's text blocks, in order (non-empty, not blank).
        stage: The stage a failure belongs to unless it names its own; the runtime sets
            ``open_stage`` before ``open()`` and ``run_stage`` before ``run()``, and a
            hook may refine it (e.g. ``"thread-start"``).
        output: Assistant output so far; an ``aborted`` or ``error`` result carries it as
            partial output, so append to it as the product answers.
        lines: The bounded line reader over the product's stdout.
        admission: What the provider's ``admission()`` context yielded, else ``None``.
        progress: The run's progress stream (use :meth:`report`).
        include_commands: Whether the host asked for command text in progress events.
        response_timeout: Seconds :meth:`await_response` waits (the instance's
            ``response_timeout_seconds``).
        state: The provider's own per-run state, ``None`` until the provider sets it
            (e.g. the session ``open()`` created, read again by ``run()`` and
            ``interrupt()``). The runtime never reads it.
        detail: A safe second line for whatever failure ends this run (e.g. the latest
            permission decision), or ``None``. Keep it current as facts are observed;
            a ``detail`` given to :meth:`fail` wins over it.
        resume: The product session id this run continues (from the request's
            continuation handle), or ``None`` for a fresh session. ``open()`` loads it;
            a product that does not have it raises
            ``child.fail(CONTINUATION_UNAVAILABLE_CATEGORY)``.
        output_schema: The JSON Schema the answer must match (the request's
            ``output_schema``, a model given as its schema), or ``None``. Only a provider
            that :attr:`~dsh_subagent.ProductProvider.enforces_output_schema` sees one;
            the host validates the answer whatever the product did.
        session_id: The product session this run worked in, set by the provider once
            known; with continuation offered, a finished run's result carries it as its
            continuation handle.
    """

    def __init__(
        self,
        *,
        product: str,
        process: ManagedProcess,
        cwd: str,
        run_id: str,
        task_texts: Sequence[str],
        stage: str,
        grace: float,
        exit_drain: float,
        max_line_bytes: int,
        malformed: MalformedLinePolicy,
        admission: object = None,
        progress: ProgressStream | None = None,
        include_commands: bool = False,
        resume: str | None = None,
        response_timeout: float = DEFAULT_RESPONSE_TIMEOUT,
        output_schema: Mapping[str, JsonValue] | type[BaseModel] | None = None,
    ) -> None:
        self._product = product
        self.process = process
        self.cwd = cwd
        self.run_id = run_id
        self.task_texts: tuple[str, ...] = tuple(task_texts)
        self.stage = stage
        self.output: list[ContentBlock] = []
        self.admission = admission
        self.state: object = None
        self.detail: str | None = None
        self.resume = resume
        self.output_schema = None if output_schema is None else output_json_schema(output_schema)
        self.session_id: str | None = None
        self._grace = grace
        self.progress = progress if progress is not None else ProgressStream()
        self.include_commands = include_commands
        self.response_timeout = response_timeout
        self.scratch = RunScratch(None)
        """The run's private temporary directory (removed with the tree); set by the runtime."""
        self.lines = LineReader(
            process.stdout_until_exit(exit_drain) if process.stdout is not None else _NoStdout(),
            max_line_bytes=max_line_bytes,
            malformed=malformed,
        )

    def report(self, event: ProgressEvent) -> None:
        """Report what the product said as progress (never blocks, never raises).

        Report only what the product stated; a command tool's ``command`` only when
        :attr:`include_commands` (the host opted in), e.g.
        ``command=text if child.include_commands else None``.
        """
        self.progress.emit(event)

    @property
    def task(self) -> str:
        """The task's text blocks concatenated with no separator."""
        return "".join(self.task_texts)

    @property
    def exit_facts(self) -> ExitFacts | None:
        """How the product process ended, or ``None`` while it runs."""
        return self.process.exit_facts

    async def send(self, data: bytes) -> None:
        """Write ``data`` to the product's stdin.

        Raises:
            anyio.BrokenResourceError: The product closed its stdin (it is exiting).
        """
        stdin = self.process.stdin
        if stdin is None:
            raise anyio.ClosedResourceError
        await stdin.send(data)

    async def send_json(self, message: Any) -> None:
        """Write ``message`` as one JSON line."""
        await self.send(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def receive_json(self) -> object:
        """The next JSON value from stdout, under the provider's malformed-line policy."""
        return await self.lines.receive_json()

    async def close_stdin(self) -> None:
        """End the product's stdin (many products exit at EOF). Never raises."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):  # a broken pipe is already closed
                await stdin.aclose()

    def response_deadline(self) -> float:
        """The deadline of a request sent now (for a response read in several steps)."""
        return anyio.current_time() + self.response_timeout

    async def await_response(
        self, receive: Callable[[], Awaitable[T]], *, deadline: float | None = None
    ) -> T:
        """Await the direct response to a request, bounded by :attr:`response_timeout`.

        Use it for every request whose response the protocol sends at once (a
        handshake, a session or turn start), never for the turn itself. A product that
        cannot parse a request may never answer it; the bound turns that into a failure
        the runtime settles, ending the whole tree.

        Args:
            receive: Reads until the response (answering other frames meanwhile).
            deadline: An absolute deadline (:meth:`response_deadline`) when one request's
                response is awaited across several calls; default: the bound from now.

        Raises:
            ProductFailureError: Category ``response-timeout`` when the bound ran out.
        """
        when = self.response_deadline() if deadline is None else deadline
        with anyio.move_on_after(when - anyio.current_time()):
            return await receive()
        # Only the bound's own cancellation leaves the block without a value.
        raise self.fail(RESPONSE_TIMEOUT)

    def fail(
        self,
        category: str,
        *,
        stage: str | None = None,
        http_status: int | None = None,
        detail: str | None = None,
        exited: bool | None = None,
    ) -> ProductFailureError:
        """A :class:`~dsh_subagent.ProductFailureError` for this product, to ``raise``.

        Args:
            category: The product's structured category (a short token, never raw
                product text), e.g. ``"handshake"`` or ``"rateLimitExceeded"``.
            stage: The stage; defaults to :attr:`stage`.
            http_status: The HTTP status the product reported, if any.
            detail: A second safe line for the diagnostic (e.g. a permission fact).
            exited: Whether the product's exit is part of the failure (see
                :class:`~dsh_subagent.ProductFailureError`); default: for ``process-exit``.
        """
        failure = ProductFailure(
            self._product, stage or self.stage, category, http_status=http_status
        )
        return ProductFailureError(failure, detail, exited=exited)

    def failure_line(self, failure: ProductFailure, detail: str | None = None) -> str:
        """The fixed safe line of ``failure`` with the exit facts observed so far merged in."""
        facts = self.process.exit_facts
        if facts is not None:
            failure = failure.with_exit(facts.exit_code, facts.signal)
        return format_product_failure(failure, detail)

    async def exit_facts_after_eof(self) -> ExitFacts | None:
        """The exit facts once stdout ended: waits up to the grace for the exit."""
        facts = self.process.exit_facts
        if facts is None and self.lines.eof:
            with anyio.move_on_after(self._grace):
                facts = await self.process.wait()
        return facts


class _NoStdout(anyio.abc.ByteReceiveStream):
    """Stands in for a product whose stdout is not piped: it is at EOF at once."""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        return None


# Failures the wire itself reports, mapped to their safe category.
_EXITED: Final = (anyio.EndOfStream, anyio.BrokenResourceError)


async def failure_of(
    product: str, child: ProductChild | None, error: Exception, *, publishing: bool
) -> tuple[ProductFailure, str | None]:
    """The safe facts of ``error`` in ``child``'s run (``None``: it failed to spawn), and
    the run's detail; the product's exit facts join when the exit is part of the failure
    (before publication always, afterwards when the failure is the exit)."""
    stage = child.stage if child is not None else "spawn"
    detail = None
    exited = True  # the runtime's own categories below are all the product ending
    if isinstance(error, ProductFailureError):
        failure, detail, exited = error.failure, error.detail, error.exited
    elif isinstance(error, _EXITED):
        # The product's stdout ended (or its stdin broke): the product exited.
        failure = ProductFailure(product, "process" if publishing else stage, "process-exit")
    elif isinstance(error, LineTooLongError):
        failure, exited = ProductFailure(product, stage, "line-too-long"), False
    elif isinstance(error, MalformedLineError):
        failure, exited = ProductFailure(product, stage, "malformed-output"), False
    else:
        failure, exited = ProductFailure(product, stage, "unknown"), False
    if child is not None:
        if detail is None:
            detail = child.detail  # the run's own fact joins any failure, once
        if not publishing or exited:
            facts = await child.exit_facts_after_eof()
            if facts is not None:
                failure = failure.with_exit(facts.exit_code, facts.signal)
    return failure, detail
