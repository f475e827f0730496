"""Test doubles: a provider whose run edits files in its cwd, and git helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import anyio
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    NO_START_CAPABILITIES,
    ContinuationHandle,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    TextBlock,
)

Edit = Callable[[Path], None]


class EditingRun:
    """A run that applies its edit at start, then settles (or waits for cancellation)."""

    def __init__(self, stop_reason: str, hold: bool, request: ResolvedSubagentStartRequest):
        self._stop_reason = stop_reason
        self._hold = hold
        self._request = request
        self._settled = anyio.Event()
        self.disposed = False
        self._request.cancel.add_listener(lambda _reason: self._settled.set())

    @property
    def id(self) -> str:
        return "editing-run"

    @property
    def local_agent(self) -> object | None:
        return None

    async def result(self) -> SubagentResult:
        if self._hold and not self.disposed:
            await self._settled.wait()
        if self._hold:
            return SubagentResult(stop_reason=ABORTED)
        return SubagentResult(output=(TextBlock(text="done"),), stop_reason=self._stop_reason)

    async def dispose(self) -> None:
        self.disposed = True
        self._settled.set()


class EditingProvider(SubagentProvider):
    """Each start applies ``edit`` to the request's cwd, then publishes an EditingRun."""

    def __init__(
        self,
        edit: Edit | None = None,
        *,
        name: str = "editor",
        stop_reason: str = COMPLETED,
        hold: bool = False,
        start_error: Exception | None = None,
    ) -> None:
        self._edit = edit
        self._name = name
        self._stop_reason = stop_reason
        self._hold = hold
        self._start_error = start_error
        self.cwds: list[str] = []
        self.started = anyio.Event()

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> SubagentCapabilities:
        return NO_START_CAPABILITIES

    @property
    def inherits_parent_context(self) -> bool:
        return False

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        assert request.parent.cwd is not None
        self.cwds.append(request.parent.cwd)
        if self._edit is not None:
            self._edit(Path(request.parent.cwd))
        self.started.set()
        if self._start_error is not None:
            raise self._start_error
        return EditingRun(self._stop_reason, self._hold, request)


class ContinuingProvider(EditingProvider):
    """:class:`EditingProvider` whose completed runs offer a continuation handle (session
    ``s-<n>``), and which records the handle each start continues."""

    def __init__(self, edits: list[Edit]) -> None:
        super().__init__(name="continuing")
        self._edits = edits
        self.resumed: list[ContinuationHandle | None] = []

    @property
    def capabilities(self) -> SubagentCapabilities:
        return dataclasses.replace(NO_START_CAPABILITIES, continuation=True)

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        assert request.parent.cwd is not None
        self.cwds.append(request.parent.cwd)
        self.resumed.append(request.resume)
        self._edits[len(self.cwds) - 1](Path(request.parent.cwd))
        session = f"s-{len(self.cwds)}"
        return _HandleRun(
            EditingRun(COMPLETED, False, request),
            ContinuationHandle(provider=self.name, product="editing", session=session),
        )


class _HandleRun:
    def __init__(self, inner: EditingRun, handle: ContinuationHandle) -> None:
        self._inner = inner
        self._handle = handle

    @property
    def id(self) -> str:
        return self._inner.id

    @property
    def local_agent(self) -> object | None:
        return None

    async def result(self) -> SubagentResult:
        done = await self._inner.result()
        return done.model_copy(update={"continuation": self._handle})

    async def dispose(self) -> None:
        await self._inner.dispose()
