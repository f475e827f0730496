"""Measure the guard's spawn overhead and terminate()→whole-tree-exit times.

Run: ``uv run --locked python packages/dsh-subprocess/bench/measure.py [asyncio|trio]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

import anyio
from dsh_subprocess import SpawnSpec, spawn

_N = 20


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"median {statistics.median(ordered) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"


async def first_byte(cwd: str, guard: bool) -> float:
    started = time.perf_counter()
    proc = await spawn(SpawnSpec(argv=("/bin/echo", "x"), cwd=cwd, host_death_guard=guard))
    assert proc.stdout is not None
    await proc.stdout.receive()
    elapsed = time.perf_counter() - started
    await proc.terminate()
    return elapsed


async def teardown(cwd: str, guard: bool, script: str, grace: float) -> float:
    spec = SpawnSpec(argv=("/bin/sh", "-c", script), cwd=cwd, host_death_guard=guard, grace=grace)
    proc = await spawn(spec)
    assert proc.stdout is not None
    await proc.stdout.receive()
    started = time.perf_counter()
    await proc.terminate()
    elapsed = time.perf_counter() - started
    assert not proc.tree_alive()
    return elapsed


_HONOURING = "sh -c 'sleep 60' & sleep 60 & echo ready; wait"
_IGNORING = (
    "setsid sh -c \"trap '' TERM; while :; do sleep 0.05; done\" & "
    "trap '' TERM; echo ready; while :; do sleep 0.05; done"
)


async def main() -> None:
    with tempfile.TemporaryDirectory() as cwd:
        for guard in (True, False):
            label = "guard " if guard else "direct"
            fb = [await first_byte(cwd, guard) for _ in range(_N)]
            print(f"{label} spawn→first byte of /bin/echo: {_ms(fb)}")
            th = [await teardown(cwd, guard, _HONOURING, 2.0) for _ in range(_N)]
            print(f"{label} terminate→tree exit, TERM-honouring tree: {_ms(th)}")
            ti = [await teardown(cwd, guard, _IGNORING, 0.5) for _ in range(5)]
            print(f"{label} terminate→tree exit, TERM-ignoring tree, grace 0.5 s: {_ms(ti)}")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
