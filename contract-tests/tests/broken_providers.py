"""Deliberately broken providers: each breaks exactly one contract rule.

They are tests of the kit itself: ``test_broken_providers.py`` runs the kit against each
one and asserts that the named rule's test, and no other, fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable

from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_example_provider.provider import _Wire
from dsh_subagent import LocalCancellation, SubagentCapabilities, SubagentResult
from dsh_subprocess import ManagedProcess, SpawnSpec


class IgnoresPersona(ExampleProvider):
    """Declares ``persona`` although the child in another process never sees it."""

    @property
    def capabilities(self) -> SubagentCapabilities:
        return SubagentCapabilities(persona=True)


class LeaksRawError(ExampleProvider):
    """Appends the child's raw error text to the safe diagnostic line."""

    def _diagnostic(self, wire: _Wire) -> str:
        raw = wire.failure.raw if wire.failure is not None else ""
        return super()._diagnostic(wire) + "\n" + raw


class LeavesGrandchild(ExampleProvider):
    """Kills only the direct child on teardown, so its grandchild survives."""

    def _spawn_spec(self, cwd: str) -> SpawnSpec:
        return super()._spawn_spec(cwd).model_copy(update={"host_death_guard": False})

    async def _release(self, proc: ManagedProcess) -> None:
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                await proc.stdin.aclose()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()


class ResultRaises(ExampleProvider):
    """Lets a failed turn escape from ``result()`` instead of settling ``error``."""

    async def _settle(
        self,
        attempt: Callable[[], Awaitable[SubagentResult]],
        local: LocalCancellation,
        wire: _Wire,
        remove: Callable[[], None],
    ) -> SubagentResult:
        return await attempt()


BROKEN: dict[str, type[ExampleProvider]] = {
    "IgnoresPersona": IgnoresPersona,
    "LeaksRawError": LeaksRawError,
    "LeavesGrandchild": LeavesGrandchild,
    "ResultRaises": ResultRaises,
}


def config(env: dict[str, str], cwd: str | None) -> ExampleConfig:
    """The configuration every broken provider is built with."""
    return ExampleConfig(env=env, cwd=cwd)
