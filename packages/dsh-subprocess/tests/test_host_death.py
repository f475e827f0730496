"""A host that dies, however it dies, leaves no product process behind."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subprocess import ManagedProcess, SpawnSpec, spawn
from dsh_subprocess.testing import alive, snapshot

pytestmark = pytest.mark.anyio

# A hang guard, not a timing: what is waited on would live for a minute or forever unless
# something killed it, so getting past it at all is the event asserted.
_HANG_GUARD_SECONDS = 30.0

# The host spawns a tree with a TERM-ignoring grandchild in its own session and a plain
# grandchild, prints the tree's pids, then either idles (to be killed) or returns.
_HOST = """
import json, os, sys
import anyio
from dsh_subprocess import SpawnSpec, _guard_server, spawn

SCRIPT = (
    "setsid sh -c \\"trap '' TERM; exec sleep 600\\" & "
    "sh -c 'sleep 60' & echo ready; wait"
)

async def main(cwd, guard, then):
    _guard_server.enabled = guard == "server"
    if guard == "portable":
        os.environ["DSH_SUBPROCESS_GUARD"] = "portable"
    proc = await spawn(SpawnSpec(argv=("/bin/sh", "-c", SCRIPT), cwd=cwd,
                                 host_death_guard=guard != "direct"))
    await proc.stdout.receive()
    with anyio.fail_after(10):
        while len(pids := proc.tree_pids()) < 4 + (guard != "direct"):
            await anyio.sleep(0.01)
    # Under the server, the server itself must go as well.
    server = [_guard_server.guard_server_pid()] if guard == "server" else []
    print(json.dumps(sorted(pids) + server), flush=True)
    if then == "idle":
        await anyio.sleep(3600)

anyio.run(main, *sys.argv[1:])
"""


async def _start_host(tmp_path: Path, guard: str, then: str) -> tuple[ManagedProcess, list[int]]:
    if guard in ("server", "per-spawn") and sys.platform != "linux":
        pytest.skip("the Linux guard exists on Linux only; the portable guard runs here")
    host_py = tmp_path / "host.py"
    host_py.write_text(_HOST)
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, str(host_py), str(tmp_path), guard, then),
            cwd=str(tmp_path),
            stdin="devnull",
            host_death_guard=False,
            grace=0.5,
        )
    )
    assert host.stdout is not None
    line = b""
    with anyio.fail_after(20):
        while not line.endswith(b"\n"):
            line += await host.stdout.receive()
    return host, json.loads(line)


async def _wait_gone(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := alive(procs)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await anyio.sleep(0.01)
    return left


@pytest.mark.parametrize("guard", ["server", "per-spawn", "portable"])
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_killed_host_leaves_nothing_behind(
    tmp_path: Path, how: signal.Signals, guard: str
) -> None:
    host, pids = await _start_host(tmp_path, guard, "idle")
    tree = snapshot(pids)
    assert len(alive(tree)) == len(pids)
    psutil.Process(host.pid).send_signal(how)
    survivors = await _wait_gone(tree, _HANG_GUARD_SECONDS)
    assert survivors == [], f"alive after the host died: {survivors}"
    assert (await host.terminate()).signal == how.name


@pytest.mark.parametrize("guard", ["server", "per-spawn", "portable", "direct"])
async def test_host_that_exits_without_terminating_kills_its_trees(
    tmp_path: Path, guard: str
) -> None:
    # Without the guard only the atexit kill path can do this.
    host, pids = await _start_host(tmp_path, guard, "return")
    tree = snapshot(pids)
    with anyio.fail_after(10):
        facts = await host.wait()
    assert facts.exit_code == 0
    assert await _wait_gone(tree, _HANG_GUARD_SECONDS) == []
    await host.terminate()
