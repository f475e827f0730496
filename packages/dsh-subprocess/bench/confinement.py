"""Measure what confinement costs: the ruleset's setup, and a spawn with it against without.

Run: ``uv run --locked python packages/dsh-subprocess/bench/confinement.py [asyncio|trio]``.

* Setup: in a forked child, the time :func:`dsh_subprocess._landlock.apply` takes for the
  policy a provider would use (the system paths, a cwd, a temp dir, the devices, two TCP
  ports): create the ruleset, add each rule, ``PR_SET_NO_NEW_PRIVS``, restrict.
* Spawn: spawn → first byte of ``/bin/echo`` through the guard server, interleaved
  confined and unconfined, and the ratio of the medians.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import anyio
from dsh_subprocess import (
    Confinement,
    SpawnSpec,
    _landlock,
    confinement,
    landlock_abi,
    spawn,
    system_read_paths,
)

_N = 200


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"median {statistics.median(ordered) * 1000:.3f} ms, p90 {p90 * 1000:.3f} ms"


def _policy(cwd: str) -> Confinement:
    return Confinement(
        read=system_read_paths(), write=(cwd, tempfile.gettempdir()), connect_ports=(443, 8080)
    )


def setup_times(cwd: str) -> list[float]:
    kernel = confinement.kernel_policy(_policy(cwd), landlock_abi())
    samples: list[float] = []
    for _ in range(_N):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            started = time.perf_counter()
            _landlock.apply(kernel)
            os.write(write_end, repr(time.perf_counter() - started).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            samples.append(float(reader.read()))
        os.waitpid(pid, 0)
    return samples


async def first_byte(cwd: str, confined: bool) -> float:
    spec = SpawnSpec(
        argv=("/bin/echo", "x"), cwd=cwd, confinement=_policy(cwd) if confined else None
    )
    started = time.perf_counter()
    proc = await spawn(spec)
    assert proc.stdout is not None
    await proc.stdout.receive()
    elapsed = time.perf_counter() - started
    await proc.terminate()
    return elapsed


async def main() -> None:
    abi = landlock_abi()
    if abi == 0:
        print("no Landlock on this kernel: nothing to measure")
        return
    with tempfile.TemporaryDirectory() as cwd:
        setup = setup_times(cwd)
        rules = len(confinement.kernel_policy(_policy(cwd), abi)[3])
        print(f"ABI {abi}, {rules} path rules + 2 port rules: ruleset setup {_ms(setup)}")
        await first_byte(cwd, False)  # start the guard server outside the samples
        plain: list[float] = []
        confined: list[float] = []
        for _ in range(_N // 2):
            plain.append(await first_byte(cwd, False))
            confined.append(await first_byte(cwd, True))
        print(f"spawn→first byte, unconfined: {_ms(plain)}")
        print(f"spawn→first byte, confined:   {_ms(confined)}")
        ratio = statistics.median(confined) / statistics.median(plain)
        print(f"ratio of the medians (confined ÷ unconfined): {ratio:.3f}")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
