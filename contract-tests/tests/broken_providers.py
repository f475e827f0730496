"""Deliberately broken providers: each breaks exactly one contract rule.

They are tests of the kit itself: ``test_broken_providers.py`` runs the kit against each
one and asserts that the named rule's test, and no other, fails. The provider runtime
makes these rules hard to break by accident, so some of them reach past its public hooks
on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal

from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_subagent import (
    ProductChild,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentResult,
    SubagentRun,
)
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver


class IgnoresPersona(ExampleProvider):
    """Declares ``persona`` although the child in another process never sees it."""

    @property
    def capabilities(self) -> SubagentCapabilities:
        return SubagentCapabilities(persona=True)


class LeaksRawError(ExampleProvider):
    """Copies the child's raw error text into the diagnostic's detail line."""

    async def run(self, child: ProductChild) -> str:
        await child.send_json({"task": child.task})
        while True:
            message = await child.receive_json()
            if isinstance(message, dict) and message.get("type") == "final":
                return str(message.get("text", ""))
            if isinstance(message, dict) and message.get("type") == "error":
                raise child.fail("child-error", detail=str(message.get("message", "")))


class LeavesGrandchild(ExampleProvider):
    """Kills only the direct child on teardown, so its grandchild survives."""

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        unguarded = spec.model_copy(update={"host_death_guard": False})
        return await super().spawn(unguarded, stderr_observer)

    async def _release(self, child: ProductChild) -> None:
        await child.close_stdin()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.process.pid, signal.SIGKILL)
        await child.process.wait()


class _RaisingRun:
    """A published run whose ``result()`` raises instead of settling ``error``."""

    def __init__(self, run: SubagentRun) -> None:
        self._run = run

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def local_agent(self) -> object | None:
        return None

    async def result(self) -> SubagentResult:
        result = await self._run.result()
        if result.stop_reason == "error":
            raise RuntimeError("the child failed")
        return result

    async def dispose(self) -> None:
        await self._run.dispose()


class ResultRaises(ExampleProvider):
    """Lets a failed turn escape from ``result()`` instead of settling ``error``."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return _RaisingRun(await super().start(request))


BROKEN: dict[str, type[ExampleProvider]] = {
    "IgnoresPersona": IgnoresPersona,
    "LeaksRawError": LeaksRawError,
    "LeavesGrandchild": LeavesGrandchild,
    "ResultRaises": ResultRaises,
}


def config(env: dict[str, str], cwd: str | None) -> ExampleConfig:
    """The configuration every broken provider is built with."""
    return ExampleConfig(env=env, cwd=cwd)
