"""Measure terminate() → whole tree gone when a grandchild escaped with ``setsid``.

Two trees, each with a grandchild in a session of its own, under a grace of 3 s:

* the grandchild honours SIGTERM: the tree should be gone in a few tens of ms, because
  SIGTERM reaches the escapee too (target ≤ 0.25 s);
* the grandchild ignores SIGTERM: the tree is gone only after the grace, by SIGKILL
  (bounded by the grace plus the escalation).

Each is measured under the guard server, a per-spawn guard and without a guard.

Run: ``uv run --locked python packages/dsh-subprocess/bench/escaped_term.py [asyncio|trio] [N]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import anyio
from dsh_subprocess import SpawnSpec, _guard_server, shutdown_guard_server, spawn

_GRACE = 3.0
_HONOURING = (
    "setsid sh -c 'trap \"exit 0\" TERM; echo escaped; while :; do sleep 0.05; done' & "
    "echo ready; wait"
)
_IGNORING = (
    "setsid sh -c \"trap '' TERM; echo escaped; while :; do sleep 0.05; done\" & echo ready; wait"
)
_MODES = {"server": (True, True), "per-spawn guard": (True, False), "direct": (False, False)}


async def _one(cwd: str, script: str, guard: bool) -> float:
    spec = SpawnSpec(
        argv=("/bin/sh", "-c", script),
        cwd=cwd,
        stderr="devnull",
        host_death_guard=guard,
        grace=_GRACE,
    )
    proc = await spawn(spec)
    assert proc.stdout is not None
    seen = b""
    while b"escaped" not in seen or b"ready" not in seen:
        seen += await proc.stdout.receive()
    # The escapee and its loop's sleep are both running before anything is signalled.
    while len(proc.tree_pids()) < 3 + guard:  # noqa: ASYNC110 - polling a process table
        await anyio.sleep(0.005)
    started = time.perf_counter()
    await proc.terminate()
    elapsed = time.perf_counter() - started
    assert not proc.tree_alive()
    return elapsed


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (
        f"median {statistics.median(ordered) * 1000:7.1f} ms  "
        f"min {ordered[0] * 1000:7.1f}  max {ordered[-1] * 1000:7.1f}  (n={len(ordered)})"
    )


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as cwd:
        for mode, (guard, served) in _MODES.items():
            _guard_server.enabled = served
            honour = [await _one(cwd, _HONOURING, guard) for _ in range(n)]
            print(f"{mode:16} setsid grandchild honours TERM, grace 3 s: {_ms(honour)}")
            ignore = [await _one(cwd, _IGNORING, guard) for _ in range(max(3, n // 4))]
            print(f"{mode:16} setsid grandchild ignores TERM, grace 3 s: {_ms(ignore)}")
            shutdown_guard_server()


if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    anyio.run(main, count, backend=backend)
