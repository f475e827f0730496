"""The example out-of-process provider: one scripted child process per run."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import ClassVar

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from dsh_subagent import (
    COMPLETED,
    LocalCancellation,
    OutOfProcessProvider,
    ProductFailure,
    ProductStartError,
    ResolvedSubagentStartRequest,
    SubagentResult,
    SubagentRun,
    SubprocessRunHandle,
    TextBlock,
    format_product_failure,
    resolve_child_cwd,
    settle_run_result,
    text_of,
)
from dsh_subprocess import ExitFacts, ManagedProcess, SpawnSpec, spawn

from dsh_example_provider.config import PREFIX, ExampleConfig

__all__ = ["ExampleProvider"]

PRODUCT = "Example"
_MAX_LINE = 1 << 20


class ChildFailed(Exception):
    """The child reported an error or exited early. Kept internal: never model-visible."""

    def __init__(self, category: str, raw: str = "", facts: ExitFacts | None = None) -> None:
        super().__init__(category)
        self.category = category
        self.raw = raw
        self.facts = facts


@dataclass
class _Wire:
    """The run's private protocol state."""

    proc: ManagedProcess
    reader: BufferedByteReceiveStream
    failure: ChildFailed | None = None
    output: list[TextBlock] = field(default_factory=list)

    async def receive(self) -> dict[str, str] | None:
        try:
            line = await self.reader.receive_until(b"\n", _MAX_LINE)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return None
        message = json.loads(line)
        return {str(k): str(v) for k, v in message.items()}

    async def send(self, message: dict[str, str]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send((json.dumps(message) + "\n").encode())


class ExampleProvider(OutOfProcessProvider[ExampleConfig]):
    """A third-party provider around a scripted child program.

    It follows the plugin contract of the product providers through
    :class:`dsh_subagent.OutOfProcessProvider`: the class carries its pydantic
    :attr:`Config`, is constructed as ``ExampleProvider(config)`` (which starts nothing),
    is named by ``provider_name`` and advertises no start capability, because a child in
    another process cannot honour parent-enforced start features.
    """

    Config: ClassVar[type[ExampleConfig]] = ExampleConfig

    def _argv(self) -> tuple[str, ...]:
        return (sys.executable, "-m", "dsh_example_provider.child")

    def _spawn_spec(self, cwd: str) -> SpawnSpec:
        return SpawnSpec(
            argv=self._argv(),
            cwd=cwd,
            env=dict(self._config.env),
            grace=self._config.dispose_grace,
        )

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        """Spawn the child, wait for its handshake, publish the run."""
        cwd = resolve_child_cwd(PREFIX, self._config.cwd, request.parent.cwd)
        if request.cancel.aborted:
            raise ProductStartError(self._line("initialize", "cancelled"))
        spec = self._spawn_spec(cwd)
        try:
            proc = await spawn(spec)
        except Exception as exc:
            raise ProductStartError(self._line("initialize", "spawn-failed")) from exc
        assert proc.stdout is not None
        wire = _Wire(proc, BufferedByteReceiveStream(proc.stdout))
        try:
            with anyio.CancelScope() as scope:
                remove = request.cancel.add_listener(lambda _reason: scope.cancel())
                try:
                    if not request.cancel.aborted:
                        hello = await wire.receive()
                        if hello is None or hello.get("type") != "ready":
                            raise ChildFailed("handshake", facts=proc.exit_facts)
                finally:
                    remove()
            if request.cancel.aborted:
                raise ChildFailed("cancelled")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._release(proc)
            if isinstance(exc, ChildFailed):
                raise ProductStartError(
                    self._line("initialize", exc.category, proc.exit_facts)
                ) from exc
            raise
        return self._publish(request, wire)

    def _publish(self, request: ResolvedSubagentStartRequest, wire: _Wire) -> SubagentRun:
        local = LocalCancellation()
        remove = request.cancel.add_listener(local.request_cancel)

        async def teardown() -> None:
            await self._release(wire.proc)

        handle = SubprocessRunHandle(
            request_cancel=local.request_cancel,
            teardown=teardown,
            remove_cancel_listener=remove,
        )
        if request.cancel.aborted:  # aborted between the handshake and the listener
            local.request_cancel()

        async def attempt() -> SubagentResult:
            return await self._turn(wire, text_of(request.prompt))

        async def settle() -> SubagentResult:
            return await self._settle(attempt, local, wire, remove)

        request.task_group.start_soon(handle.drive, settle)
        return handle

    async def _settle(
        self,
        attempt: Callable[[], Awaitable[SubagentResult]],
        local: LocalCancellation,
        wire: _Wire,
        remove: Callable[[], None],
    ) -> SubagentResult:
        return await settle_run_result(
            attempt,
            local=local,
            collect_output=lambda: tuple(wire.output),
            collect_diagnostic=lambda: self._diagnostic(wire),
            remove_cancel_listener=remove,
        )

    async def _turn(self, wire: _Wire, task: str) -> SubagentResult:
        await wire.send({"task": task})
        while True:
            message = await wire.receive()
            if message is None:
                facts = await wire.proc.wait()
                wire.failure = ChildFailed("process-exit", facts=facts)
                raise wire.failure
            if message.get("type") == "final":
                text = message.get("text", "")
                wire.output.append(TextBlock(text=text))
                return SubagentResult(output=(TextBlock(text=text),), stop_reason=COMPLETED)
            if message.get("type") == "error":
                facts = await wire.proc.wait()
                wire.failure = ChildFailed("child-error", message.get("message", ""), facts)
                raise wire.failure

    def _diagnostic(self, wire: _Wire) -> str:
        failure = wire.failure or ChildFailed("unknown")
        return self._line("turn", failure.category, failure.facts)

    def _line(self, stage: str, category: str, facts: ExitFacts | None = None) -> str:
        return format_product_failure(
            ProductFailure(
                product=PRODUCT,
                stage=stage,
                category=category,
                exit_code=None if facts is None else facts.exit_code,
                signal=None if facts is None else facts.signal,
            )
        )

    async def _release(self, proc: ManagedProcess) -> None:
        """Close the wire and terminate the whole tree, waiting for its exit."""
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                await proc.stdin.aclose()
        await proc.terminate()
        await proc.aclose()
