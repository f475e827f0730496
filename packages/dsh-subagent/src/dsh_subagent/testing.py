"""Test doubles other distributions reuse: a scripted provider on the shared runtime.

:class:`ScriptedProvider` starts no process. It publishes through the same
:func:`~dsh_subagent.publish_run` the product runtime uses (setup in the caller's task,
then the driver in ``request.task_group`` with never-raising settlement), so Jobs, the
subagent tool and the contract kit exercise the real settlement, cancellation and
disposal rules.

Each ``start()`` consumes the next :class:`Script` (the last one repeats). Gates are
``anyio.Event`` objects the test creates and passes in a script, so a test can hold a
start before publication or a run before settlement and release it when it wants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from pydantic import JsonValue

from dsh_subagent.errors import StartCancelledError
from dsh_subagent.publication import publish_run
from dsh_subagent.run_handle import SubprocessRunHandle
from dsh_subagent.types import (
    COMPLETED,
    NO_START_CAPABILITIES,
    ContentBlock,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentResult,
    TextBlock,
)

__all__ = ["RunRecord", "Script", "ScriptedProvider"]


@dataclass(frozen=True)
class Script:
    """What one scripted run does.

    Attributes:
        output: Final output of a successful attempt.
        stop_reason: Stop reason of a successful attempt (any string, unknown ones too).
        diagnostic: Diagnostic of a successful attempt (e.g. with ``max-tokens``).
        structured: Structured value of a successful attempt.
        partial: What the run reports as partial output on ``aborted`` / ``error``.
        start_error: ``start()`` raises this before publication (nothing published).
        attempt_error: The attempt raises this; the run settles ``error``.
        error_diagnostic: Diagnostic collected when the attempt fails.
        result_error: ``result()`` raises this (an infrastructure fault). This breaks
            ``settlement:result-never-raises`` on purpose, to test consumers.
        dispose_error: The teardown raises this (``dispose()`` re-raises it).
        hold_start: ``start()`` waits for this event (or aborts on cancellation).
        hold_result: The attempt waits for this event (or is cancelled locally).
        run_id: The provider-minted run id (default: a fresh uuid4).
    """

    output: tuple[ContentBlock, ...] = ()
    stop_reason: str = COMPLETED
    diagnostic: str | None = None
    structured: JsonValue | None = None
    partial: tuple[ContentBlock, ...] = ()
    start_error: BaseException | None = None
    attempt_error: Exception | None = None
    error_diagnostic: str | None = None
    result_error: Exception | None = None
    dispose_error: Exception | None = None
    hold_start: anyio.Event | None = None
    hold_result: anyio.Event | None = None
    run_id: str | None = None

    @classmethod
    def answer(cls, text: str) -> Script:
        """A run that completes with one text block ``text``.

        Combine with :func:`dataclasses.replace` for gates and failures.
        """
        return cls(output=(TextBlock(text=text),))


@dataclass
class RunRecord:
    """What the provider observed for one ``start()`` call.

    ``cancel_requests`` counts the local cancel requests ``dispose()`` made (one per
    teardown: dispose always cancels locally before it tears down).
    """

    request: ResolvedSubagentStartRequest
    script: Script
    handle: SubprocessRunHandle | None = None
    teardowns: int = 0
    cancel_requests: int = 0
    cancel_reasons: list[str] = field(default_factory=list)
    attempt_started: bool = False


class _Counter:
    """A count that tasks can wait on reaching a threshold."""

    def __init__(self) -> None:
        self.value = 0
        self._waiters: list[tuple[int, anyio.Event]] = []

    def bump(self) -> None:
        self.value += 1
        for threshold, event in self._waiters:
            if self.value >= threshold:
                event.set()

    async def wait_for(self, threshold: int) -> None:
        if self.value >= threshold:
            return
        event = anyio.Event()
        self._waiters.append((threshold, event))
        await event.wait()


class ScriptedProvider(SubagentProvider):
    """A configurable in-memory provider for tests.

    Args:
        name: Registry name.
        scripts: Per-start behaviour, consumed in order; the last one repeats.
        capabilities: Advertised start features (default: none, like a product).
        inherits_parent_context: The descriptive context flag.
    """

    def __init__(
        self,
        name: str = "scripted",
        scripts: Sequence[Script] = (Script.answer("done"),),
        *,
        capabilities: SubagentCapabilities = NO_START_CAPABILITIES,
        inherits_parent_context: bool = False,
    ) -> None:
        if not scripts:
            raise ValueError("ScriptedProvider needs at least one script")
        self._name = name
        self._scripts = list(scripts)
        self._capabilities = capabilities
        self._inherits = inherits_parent_context
        self.records: list[RunRecord] = []
        self._entered = _Counter()
        self._attempts = _Counter()
        self._published = _Counter()

    @property
    def name(self) -> str:
        """Registry name."""
        return self._name

    @property
    def capabilities(self) -> SubagentCapabilities:
        """The configured capabilities."""
        return self._capabilities

    @property
    def inherits_parent_context(self) -> bool:
        """The configured context flag."""
        return self._inherits

    @property
    def start_count(self) -> int:
        """How many times ``start()`` was called."""
        return self._entered.value

    @property
    def published_count(self) -> int:
        """How many runs were published."""
        return self._published.value

    async def wait_started(self, count: int = 1) -> None:
        """Wait until ``start()`` has been entered ``count`` times."""
        await self._entered.wait_for(count)

    async def wait_attempts(self, count: int = 1) -> None:
        """Wait until ``count`` published runs are inside their attempt."""
        await self._attempts.wait_for(count)

    def _next_script(self) -> Script:
        index = min(len(self.records), len(self._scripts) - 1)
        return self._scripts[index]

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        """Publish one scripted run (see :class:`Script`)."""
        script = self._next_script()
        record = RunRecord(request=request, script=script)
        self.records.append(record)
        self._entered.bump()
        if script.hold_start is not None:
            await _wait_or_cancelled(script.hold_start, request)
        if request.cancel.aborted:
            raise StartCancelledError(
                "scripted: the request was cancelled before the run was published"
            )
        if script.start_error is not None:
            raise script.start_error

        async def teardown() -> None:
            record.teardowns += 1
            record.cancel_requests += 1
            await anyio.lowlevel.checkpoint()
            if script.dispose_error is not None:
                raise script.dispose_error

        async def attempt() -> SubagentResult:
            record.attempt_started = True
            self._attempts.bump()
            if script.hold_result is not None:
                await script.hold_result.wait()
            else:
                await anyio.lowlevel.checkpoint()
            if script.attempt_error is not None:
                raise script.attempt_error
            if script.result_error is not None:
                raise _ResultFault(script.result_error)
            return SubagentResult(
                output=script.output,
                structured=script.structured,
                diagnostic=script.diagnostic,
                stop_reason=script.stop_reason,
            )

        def on_error(error: Exception, stop_reason: str) -> None:
            # Settlement flattens every failure to ``error``; a scripted result fault
            # instead makes ``result()`` raise, before settlement's value is delivered.
            if isinstance(error, _ResultFault) and record.handle is not None:
                record.handle.set_exception(error.error)

        record.handle = publish_run(
            request,
            attempt=attempt,
            teardown=teardown,
            collect_output=lambda: script.partial,
            collect_diagnostic=lambda: script.error_diagnostic,
            on_error=on_error,
            on_cancel=record.cancel_reasons.append,
            run_id=script.run_id,
        )
        self._published.bump()
        return record.handle


class _ResultFault(Exception):
    """Carries a scripted ``result_error`` through settlement to the handle."""

    def __init__(self, error: Exception) -> None:
        super().__init__("scripted result fault")
        self.error = error


async def _wait_or_cancelled(gate: anyio.Event, request: ResolvedSubagentStartRequest) -> None:
    async with anyio.create_task_group() as group:

        async def on_cancel() -> None:
            await request.cancel.wait()
            group.cancel_scope.cancel()

        async def on_gate() -> None:
            await gate.wait()
            group.cancel_scope.cancel()

        group.start_soon(on_cancel)
        group.start_soon(on_gate)
