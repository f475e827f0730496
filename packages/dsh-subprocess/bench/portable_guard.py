"""The portable guard against the Linux guard: host death, spawn cost, the escape window.

Three measurements, all in one run, modes interleaved (A B A B) so load drifts hit both:

1. host SIGKILL → whole tree gone. A separate host interpreter spawns a tree (a product,
   a plain grandchild and a grandchild in a session of its own, both honouring SIGTERM)
   and is SIGKILLed; the time until none of the tree's pids is alive. Modes: the Linux
   guard (server), the Linux per-spawn guard, the portable guard (forced). A second row
   uses a TERM-ignoring escapee: the portable guard waits out the grace (capped at 1 s)
   before its SIGKILL, where the Linux guard kills at once.
2. spawn → first byte of ``/bin/echo``: every mode, and the ratios to direct spawning.
3. the escape window: a product double-forks a TERM-ignoring daemon into a session of its
   own, its intermediate process living L ms before it exits (so the daemon is
   re-parented away). After the intermediate is gone, ``terminate()``; the daemon
   escaped if it is still alive. Escapes out of N per L, for the portable guard (the
   Linux guard, a subreaper, never lets one escape; it is shown as the control).

Run: ``uv run --locked python packages/dsh-subprocess/bench/portable_guard.py [N [PART...]]``
(parts: ``death``, ``spawn``, ``escape``; all by default).
Every process it starts is gone when it returns (escaped daemons are killed by pid).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil
from dsh_subprocess import SpawnSpec, _guard_server, shutdown_guard_server, spawn
from dsh_subprocess._spawn import GUARD_MODE_VARIABLE
from dsh_subprocess.testing import alive, snapshot

_HOST = """
import json, os, sys
import anyio
from dsh_subprocess import SpawnSpec, _guard_server, spawn

SCRIPT = (
    "setsid sh -c '%s echo x > /dev/null; exec sleep 600' & "
    "sh -c 'sleep 600' & echo ready; wait"
)

async def main(cwd, mode, trap):
    _guard_server.enabled = mode == "server"
    if mode == "portable":
        os.environ["DSH_SUBPROCESS_GUARD"] = "portable"
    trap = "trap \\"\\" TERM;" if trap == "ignore" else ""
    proc = await spawn(SpawnSpec(argv=("/bin/sh", "-c", SCRIPT % trap), cwd=cwd, grace=2.0))
    await proc.stdout.receive()
    while len(pids := proc.tree_pids()) < 5:
        await anyio.sleep(0.005)
    await anyio.sleep(0.2)  # the portable guard has scanned the tree by now
    server = [_guard_server.guard_server_pid()] if mode == "server" else []
    print(json.dumps(sorted(pids) + server), flush=True)
    await anyio.sleep(3600)

anyio.run(main, *sys.argv[1:])
"""

_MODES = ("server", "per-spawn", "portable")


def _set_mode(mode: str) -> bool:
    """Select ``mode`` for spawns of this process; return ``host_death_guard``."""
    _guard_server.enabled = mode == "server"
    if mode == "portable":
        os.environ[GUARD_MODE_VARIABLE] = "portable"
    else:
        os.environ.pop(GUARD_MODE_VARIABLE, None)
    return mode != "direct"


def _host_death(cwd: str, mode: str, trap: str) -> float:
    host_py = Path(cwd) / "host.py"
    host_py.write_text(_HOST)
    host = subprocess.Popen(  # noqa: TID251 - the host must be our plain child
        [sys.executable, str(host_py), cwd, mode, trap],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert host.stdout is not None
    tree = snapshot(json.loads(host.stdout.readline()))
    host.kill()
    started = time.perf_counter()
    while alive(tree):
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    host.wait()
    host.stdout.close()
    return elapsed


async def _first_byte(cwd: str, mode: str) -> float:
    guard = _set_mode(mode)
    started = time.perf_counter()
    proc = await spawn(SpawnSpec(argv=("/bin/echo", "x"), cwd=cwd, host_death_guard=guard))
    assert proc.stdout is not None
    await proc.stdout.receive()
    elapsed = time.perf_counter() - started
    await proc.terminate()
    return elapsed


_DOUBLE_FORK = (
    "(setsid sh -c \"trap '' TERM; echo \\$\\$ > daemon.pid; exec sleep 600\" "
    "</dev/null >/dev/null 2>&1 & sleep {linger}); echo ready; exec sleep 600"
)


async def _escapes(cwd: str, mode: str, linger_ms: int) -> bool:
    guard = _set_mode(mode)
    pidfile = Path(cwd) / "daemon.pid"
    pidfile.unlink(missing_ok=True)
    script = _DOUBLE_FORK.format(linger=linger_ms / 1000)
    proc = await spawn(
        SpawnSpec(argv=("/bin/sh", "-c", script), cwd=cwd, host_death_guard=guard, grace=0.5)
    )
    assert proc.stdout is not None
    await proc.stdout.receive()  # printed once the intermediate has exited
    while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110
        await anyio.sleep(0.002)
    daemon = snapshot([int(pidfile.read_text())])
    await proc.terminate()
    left = alive(daemon)
    for escaped in left:
        escaped.kill()  # started by this bench, killed by pid
    return bool(left)


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:7.1f} ms (min {min(samples) * 1000:.1f})"


async def main(n: int, parts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.path.realpath(tmp)  # noqa: ASYNC240 - once, before anything is measured
        print(f"load average {os.getloadavg()[0]:.1f}, {n} samples per row")
        for trap in ("honour", "ignore") if "death" in parts else ():
            deaths: dict[str, list[float]] = {mode: [] for mode in _MODES}
            for _ in range(n):
                for mode in _MODES:
                    deaths[mode].append(_host_death(cwd, mode, trap))
            for mode in _MODES:
                label = f"host SIGKILL → tree gone, escapee {trap}s TERM, {mode:9}"
                print(f"{label}: {_ms(deaths[mode])}")
            ratio = statistics.median(deaths["portable"]) / statistics.median(deaths["per-spawn"])
            print(f"  ratio portable / per-spawn (medians): {ratio:.2f}")
        spawns: dict[str, list[float]] = {
            mode: [] for mode in ((*_MODES, "direct") if "spawn" in parts else ())
        }
        for _ in range(2):  # warm-up
            for mode in spawns:
                await _first_byte(cwd, mode)
        for _ in range(n * 2):
            for mode in spawns:
                spawns[mode].append(await _first_byte(cwd, mode))
        for mode, samples in spawns.items():
            direct = statistics.median(spawns["direct"])
            ratio = statistics.median(samples) / direct
            print(f"spawn → first byte, {mode:9}: {_ms(samples)}, ratio to direct {ratio:.1f}")
        for linger in (0, 10, 50, 100, 200) if "escape" in parts else ():
            for mode in ("per-spawn", "portable"):
                escaped = sum([await _escapes(cwd, mode, linger) for _ in range(n)])
                print(
                    f"double fork, intermediate lives {linger:3} ms, {mode:9}: "
                    f"{escaped}/{n} escaped"
                )
        _set_mode("server")
        shutdown_guard_server()
    left = [p for p in psutil.Process().children(recursive=True)]
    print(f"processes left: {len(left)}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parts = sys.argv[2:] or ["death", "spawn", "escape"]
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 10, parts)
