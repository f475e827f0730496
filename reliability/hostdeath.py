"""Host death: a host running delegations is killed; its product trees must not outlive it."""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
from dsh_subprocess import SpawnSpec, spawn
from dsh_subprocess.testing import alive, snapshot

__all__ = ["HOST_DEATH_DEADLINE", "HostDeathReport", "kill_host"]

HOST_PROGRAM: Final = str(Path(__file__).resolve().with_name("host_program.py"))
HOST_DEATH_DEADLINE: Final = 2.0
"""Seconds after the host's death by which no product process may remain (issue 10)."""


@dataclass
class HostDeathReport:
    """One host killed by ``how``.

    Attributes:
        how: ``SIGTERM`` or ``SIGKILL``.
        tree: Pids of every product process (and guard) the host had started.
        survivors: Those alive :data:`HOST_DEATH_DEADLINE` seconds after the kill.
        seconds: How long until the last one was gone (or the deadline).
    """

    how: str
    tree: list[int] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """The host had product processes and none outlived it."""
        return bool(self.tree) and not self.survivors


async def kill_host(root: Path, how: signal.Signals, guard: str = "auto") -> HostDeathReport:
    """Start :mod:`reliability.host_program` in ``root``, kill it with ``how``, judge.

    ``guard`` is the host's ``DSH_SUBPROCESS_GUARD`` setting: ``auto`` (this platform's
    guard) or ``portable`` (the macOS guard, forced).
    """
    report = HostDeathReport(how.name)
    # The host must not be guarded itself: its own death is what is being tested.
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, HOST_PROGRAM, str(root)),
            cwd=str(root),
            stdin="devnull",
            stderr="devnull",
            host_death_guard=False,
            grace=0.5,
            env={"DSH_SUBPROCESS_GUARD": guard},
        )
    )
    try:
        assert host.stdout is not None
        line = b""
        with anyio.fail_after(60):
            while not line.endswith(b"\n"):
                line += await host.stdout.receive()
        report.tree = [int(pid) for pid in json.loads(line)]
        procs = snapshot(report.tree)
        host_proc = snapshot([host.pid])
        for proc in host_proc:
            proc.send_signal(how)
        started = time.monotonic()
        deadline = started + HOST_DEATH_DEADLINE
        while (left := alive(procs)) and time.monotonic() < deadline:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        report.seconds = time.monotonic() - started
        for proc in alive(procs):
            report.survivors.append(f"{proc.pid} {proc.name()}")
            proc.kill()
        del left
    finally:
        await host.terminate()
    return report
