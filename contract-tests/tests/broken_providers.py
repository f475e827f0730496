"""Deliberately broken providers: each breaks exactly one contract rule.

They are tests of the kit itself: ``test_broken_providers.py`` runs the kit against each
one and asserts that the named rule's test, and no other, fails. The provider runtime
makes these rules hard to break by accident, so some of them reach past its public hooks
on purpose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import anyio
from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_subagent import (
    CancelController,
    ConfinementSetting,
    Launch,
    ProductChild,
    ProductReach,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
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


class DropsOverlay(ExampleProvider):
    """Spawns the child without the configured ``env`` overlay."""

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        return await super().spawn(spec.model_copy(update={"env": {}}), stderr_observer)


class IgnoresPreStartAbort(ExampleProvider):
    """Starts a run even when the request's signal was aborted before ``start()``."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        if request.cancel.aborted:
            request = request.model_copy(update={"cancel": CancelController().signal})
        return await super().start(request)


# A child that follows the directives but never signals its hold point (no ready file).
_SILENT_CHILD = """
import json, re, sys
print(json.dumps({"type": "ready"}), flush=True)
task = json.loads(sys.stdin.readline())["task"]
found = re.search(r"dsh-contract/1 (complete|fail|hold) (T-[0-9a-f]+)", task)
behaviour, token = found.groups() if found else ("complete", "done")
if behaviour == "complete":
    print(json.dumps({"type": "final", "text": token}), flush=True)
elif behaviour == "fail":
    print(json.dumps({"type": "error", "message": "failed"}), flush=True)
    sys.exit(3)
else:
    sys.stdin.read()
"""


class HoldsSilently(ExampleProvider):
    """Its child holds as asked but never creates the ready file."""

    def launch(self, cwd: str) -> Launch:
        return Launch(argv=(sys.executable, "-c", _SILENT_CHILD))


class _Oversized:
    """A published run whose failed result carries a diagnostic past the bound."""

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
        if result.diagnostic is None:
            return result
        padded = result.diagnostic + "\n" + "x" * 6000
        return result.model_copy(update={"diagnostic": padded})

    async def dispose(self) -> None:
        await self._run.dispose()


class UnboundedDiagnostic(ExampleProvider):
    """Appends 6000 bytes to a failed run's diagnostic, past the 4096-byte bound."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return _Oversized(await super().start(request))


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


class LeavesStraySleeper(ExampleProvider):
    """Starts a detached sleeper of its own (``setsid --fork``) besides each run's child,
    and never ends it: the sleeper is not the child and carries none of its overlay."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        subprocess.run(  # noqa: ASYNC221 - a broken provider, on purpose
            ["setsid", "--fork", "sleep", "3600"],
            env={"PATH": os.environ.get("PATH", "")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        return await super().start(request)


HANG_MARKER = "DSH_BROKEN_HANG_MARKER"
"""Parent variable naming a file a hanging dispose creates once it hangs (for SIGINT)."""


class _HangingDispose:
    """A published run whose ``dispose()`` never returns; ``shielded``: not even when
    cancelled. The run's child stays alive meanwhile."""

    def __init__(self, run: SubagentRun, shielded: bool) -> None:
        self._run = run
        self._shielded = shielded

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def local_agent(self) -> object | None:
        return None

    async def result(self) -> SubagentResult:
        return await self._run.result()

    async def dispose(self) -> None:
        if marker := os.environ.get(HANG_MARKER):
            Path(marker).touch()  # noqa: ASYNC240 - an instant signal to the test
        if self._shielded:
            with anyio.CancelScope(shield=True):
                await anyio.sleep_forever()
        await anyio.sleep_forever()


class DisposeHangsShielded(ExampleProvider):
    """Its runs' ``dispose()`` hangs inside a scope shielded from cancellation."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return _HangingDispose(await super().start(request), shielded=True)


class DisposeHangs(ExampleProvider):
    """Its runs' ``dispose()`` hangs until cancelled."""

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return _HangingDispose(await super().start(request), shielded=False)


# A child that answers every directive, ``hold`` included, as if told ``complete``.
_NEVER_HOLDS_CHILD = """
import json, re, sys
print(json.dumps({"type": "ready"}), flush=True)
task = json.loads(sys.stdin.readline())["task"]
found = re.search(r"dsh-contract/1 (complete|fail|hold) (T-[0-9a-f]+)", task)
behaviour, token = found.groups() if found else ("complete", "done")
if behaviour == "fail":
    print(json.dumps({"type": "error", "message": "failed"}), flush=True)
    sys.exit(3)
print(json.dumps({"type": "final", "text": token}), flush=True)
"""


class IgnoresHold(ExampleProvider):
    """Its child ignores the ``hold`` directive: it answers at once, as if told ``complete``."""

    def launch(self, cwd: str) -> Launch:
        return Launch(argv=(sys.executable, "-c", _NEVER_HOLDS_CHILD))


_OFF = ConfinementSetting(mode="off")


class ConfinementOff(ExampleProvider):
    """Its instances run with confinement ``off``, whatever they were configured with."""

    def __init__(self, config: ExampleConfig) -> None:
        super().__init__(config.model_copy(update={"confinement": _OFF}))


class NotConfinable(SubagentProvider):
    """Starts its product another way than through dsh-subprocess's confinement: here, a
    provider of its own that runs an unconfined example provider (not a
    ``ProductProvider``, so dsh has no policy for it)."""

    def __init__(self, config: ExampleConfig) -> None:
        self._product = ConfinementOff(config)

    @property
    def name(self) -> str:
        return self._product.name

    @property
    def capabilities(self) -> SubagentCapabilities:
        return self._product.capabilities

    @property
    def inherits_parent_context(self) -> bool:
        return self._product.inherits_parent_context

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return await self._product.start(request)


class GrantsHostHome(ExampleProvider):
    """Confined, but grants its product the host's ``HOME`` to read (one path too many)."""

    def confinement_reach(
        self, launch: Launch, env: Mapping[str, str | None], cwd: str
    ) -> ProductReach:
        reach = super().confinement_reach(launch, env, cwd)
        return dataclasses.replace(reach, read=(*reach.read, os.environ["HOME"]))


BROKEN: dict[str, type[SubagentProvider]] = {
    "ConfinementOff": ConfinementOff,
    "GrantsHostHome": GrantsHostHome,
    "NotConfinable": NotConfinable,
    "DisposeHangs": DisposeHangs,
    "DisposeHangsShielded": DisposeHangsShielded,
    "DropsOverlay": DropsOverlay,
    "HoldsSilently": HoldsSilently,
    "IgnoresHold": IgnoresHold,
    "IgnoresPersona": IgnoresPersona,
    "IgnoresPreStartAbort": IgnoresPreStartAbort,
    "LeaksRawError": LeaksRawError,
    "LeavesGrandchild": LeavesGrandchild,
    "LeavesStraySleeper": LeavesStraySleeper,
    "ResultRaises": ResultRaises,
    "UnboundedDiagnostic": UnboundedDiagnostic,
}


def config(env: dict[str, str], cwd: str | None) -> ExampleConfig:
    """The configuration every broken provider is built with."""
    return ExampleConfig(env=env, cwd=cwd)
