"""The portable guard (macOS, the BSDs; forced here) on what only it has to handle.

The cases every mode shares (trees, TERM ignorers, setsid escapees, a stderr flood, spawn
failures, host death) run against it through the ``guarded`` fixture and
``test_host_death.py``. These are the portable guard's own: how it is chosen, and the
members it must keep knowing after they left its subtree, since no subreaper keeps them
there.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subprocess import DshSubprocessError, ExitFacts, ManagedProcess, SpawnSpec, spawn
from dsh_subprocess._direct import PORTABLE_GUARD_PATH
from dsh_subprocess._spawn import GUARD_MODE_VARIABLE, guard_mode
from dsh_subprocess.testing import ProcessWatch, alive, snapshot

pytestmark = pytest.mark.anyio

_HANG_GUARD_SECONDS = 30.0  # getting past a wait at all is the event asserted


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GUARD_MODE_VARIABLE, "portable")


def sh(script: str, cwd: Path, **fields: object) -> SpawnSpec:
    return SpawnSpec.model_validate({"argv": ("/bin/sh", "-c", script), "cwd": str(cwd), **fields})


async def _read_until(proc: ManagedProcess, marker: bytes) -> bytes:
    assert proc.stdout is not None
    seen = b""
    with anyio.fail_after(_HANG_GUARD_SECONDS):
        while marker not in seen:
            seen += await proc.stdout.receive()
    return seen


def test_the_setting_picks_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GUARD_MODE_VARIABLE, raising=False)
    assert guard_mode() == ("linux" if sys.platform == "linux" else "portable")
    monkeypatch.setenv(GUARD_MODE_VARIABLE, "auto")
    assert guard_mode() == ("linux" if sys.platform == "linux" else "portable")
    monkeypatch.setenv(GUARD_MODE_VARIABLE, "portable")
    assert guard_mode() == "portable"


async def test_an_unknown_setting_is_rejected_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GUARD_MODE_VARIABLE, "subreaper")
    with ProcessWatch() as watch:
        with pytest.raises(DshSubprocessError, match=GUARD_MODE_VARIABLE):
            await spawn(sh("exit 0", tmp_path))
        assert watch.alive() == []
        assert not watch.seen
    # Unguarded spawns do not read it.
    async with await spawn(sh("exit 3", tmp_path, host_death_guard=False)) as proc:
        assert (await proc.wait()).exit_code == 3


@pytest.mark.usefixtures("portable")
async def test_the_product_runs_under_the_portable_guard(tmp_path: Path) -> None:
    async with await spawn(sh("echo ready; exec sleep 60", tmp_path)) as proc:
        await _read_until(proc, b"ready")
        guard = psutil.Process(proc.pid).parent()
        assert guard is not None
        assert guard.cmdline()[3] == PORTABLE_GUARD_PATH
        # The guard leads the product's session and group, as the Linux guard does.
        assert os.getpgid(proc.pid) == guard.pid == os.getsid(proc.pid)
        assert proc.pid in proc.tree_pids()
        assert guard.pid in proc.tree_pids()
    assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not proc.tree_alive()


@pytest.mark.usefixtures("portable")
async def test_a_double_forked_daemon_in_the_group_is_killed_after_it_was_reparented(
    tmp_path: Path, sent_signals: list[int]
) -> None:
    # No subreaper: the daemon's parent exits at once and the kernel re-parents it away
    # from the tree (to init or the nearest subreaper). It stays in the guard's process
    # group, so the guard still finds it; it records SIGTERM and ignores it, so only a
    # SIGKILL from the guard (the host never knew it) can end it.
    pidfile = tmp_path / "daemon.pid"
    script = (
        "(sh -c \"trap 'echo TERM >> events' TERM; echo \\$\\$ > daemon.pid; "
        'while :; do sleep 0.05; done" '
        "</dev/null >/dev/null 2>&1 &); echo ready; exec sleep 60"
    )
    # A grace long enough for a guard on a loaded machine to pass SIGTERM on first.
    proc = await spawn(sh(script, tmp_path, grace=2.0))
    await _read_until(proc, b"ready")
    with anyio.fail_after(_HANG_GUARD_SECONDS):
        while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110
            await anyio.sleep(0.01)
    daemon = snapshot([int(pidfile.read_text())])
    guard = psutil.Process(proc.pid).parent()
    assert guard is not None
    assert daemon[0].ppid() not in (proc.pid, guard.pid)  # it left the subtree
    assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert alive(daemon) == []
    assert (tmp_path / "events").read_text() == "TERM\n"  # asked first, then killed
    assert sent_signals[0] == signal.SIGTERM


@pytest.mark.usefixtures("portable")
async def test_the_host_exit_path_leaves_the_kill_to_the_guard(tmp_path: Path) -> None:
    # kill_tree_now() does not SIGKILL a live portable guard: the guard knows members the
    # host does not, so it is told to kill ("K" on the lifeline) and reports the product.
    proc = await spawn(sh("trap '' TERM; echo ready; exec sleep 60", tmp_path, grace=60))
    await _read_until(proc, b"ready")
    guard = psutil.Process(proc.pid).parent()
    assert guard is not None
    proc.kill_tree_now()
    with anyio.fail_after(_HANG_GUARD_SECONDS):
        facts = await proc.wait()
        await proc.wait_tree_exit()
    assert facts == ExitFacts(exit_code=None, signal="SIGKILL")  # reaped by a living guard
    await proc.terminate()
    assert alive([guard]) == []


# A host that spawns, under the portable guard, a product whose child left the session
# and records every SIGTERM it gets while ignoring it; it prints the tree's pids, then
# idles until it is killed. The escapee's stdout and stderr go to /dev/null once it has said
# "escaped": a write to the dead host's pipe would end it by SIGPIPE, not by the guard.
_ASKING_HOST = """
import json, os, sys
import anyio
from dsh_subprocess import SpawnSpec, spawn

os.environ["DSH_SUBPROCESS_GUARD"] = "portable"
SCRIPT = (
    "setsid sh -c \\"trap 'echo TERM >> events' TERM; echo escaped; exec >/dev/null 2>&1; "
    "while :; do sleep 0.05; done\\" & echo ready; wait"
)

async def main(cwd):
    proc = await spawn(SpawnSpec(argv=("/bin/sh", "-c", SCRIPT), cwd=cwd, grace=30.0))
    seen = b""
    while b"escaped" not in seen or b"ready" not in seen:
        seen += await proc.stdout.receive()
    while len(pids := proc.tree_pids()) < 4:  # guard, product, escapee, its sleep
        await anyio.sleep(0.01)
    print(json.dumps(sorted(pids)), flush=True)
    await anyio.sleep(3600)

anyio.run(main, sys.argv[1])
"""


async def test_a_killed_host_s_tree_is_asked_to_stop_then_killed(tmp_path: Path) -> None:
    # Host death: the escapee is not in the guard's group and ignores SIGTERM. It records
    # the guard's SIGTERM, and is gone afterwards though the spec's grace is 30 s: the
    # guard caps it on host death (a dead host waits for no answer).
    host_py = tmp_path / "host.py"
    host_py.write_text(_ASKING_HOST)
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, str(host_py), str(tmp_path)),
            cwd=str(tmp_path),
            stdin="devnull",
            host_death_guard=False,
            grace=0.5,
        )
    )
    try:
        assert host.stdout is not None
        line = b""
        with anyio.fail_after(_HANG_GUARD_SECONDS):
            while not line.endswith(b"\n"):
                line += await host.stdout.receive()
        tree = snapshot(json.loads(line))
        psutil.Process(host.pid).send_signal(signal.SIGKILL)
        with anyio.fail_after(_HANG_GUARD_SECONDS):
            while alive(tree):  # noqa: ASYNC110 - other processes' exits have no event here
                await anyio.sleep(0.01)
    finally:
        await host.terminate()
    assert (tmp_path / "events").read_text().splitlines() == ["TERM"]
