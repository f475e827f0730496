"""The per-host guard server: one server, one guard child per product, trees kept apart."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subprocess import (
    ExitFacts,
    ManagedProcess,
    SpawnSpec,
    _guard_server,
    guard_server_pid,
    shutdown_guard_server,
    spawn,
)
from dsh_subprocess.testing import alive, snapshot

# The Linux guard's own machinery (server, relay through /proc); the portable guard's
# counterpart is test_portable_guard.py.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform != "linux", reason="the Linux guard exists on Linux only"),
]

# A hang guard, not a timing: what is waited on would live for a minute or forever unless
# something killed it, so getting past it at all is the event asserted.
_HANG_GUARD_SECONDS = 30.0

# A TERM-ignoring grandchild in a session of its own, and a plain grandchild.
_TREE = (
    "setsid sh -c \"trap '' TERM; while :; do sleep 0.05; done\" & "
    "sh -c 'sleep 60' & echo ready; wait"
)
_TREE_SIZE = 6  # guard, product sh, setsid sh, its sleep, sh -c, its sleep 60


def sh(script: str, cwd: Path, **fields: object) -> SpawnSpec:
    return SpawnSpec.model_validate({"argv": ("/bin/sh", "-c", script), "cwd": str(cwd), **fields})


async def _ready_tree(cwd: Path, grace: float = 0.3) -> tuple[ManagedProcess, list[psutil.Process]]:
    proc = await spawn(sh(_TREE, cwd, grace=grace))
    assert proc.stdout is not None
    with anyio.fail_after(10):
        await proc.stdout.receive()
        while len(pids := proc.tree_pids()) < _TREE_SIZE:  # noqa: ASYNC110 - a process table
            await anyio.sleep(0.01)
    return proc, snapshot(pids)


def _long_lived(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The members that live until killed (the TERM-ignoring loop's sleeps come and go)."""
    return [p for p in tree if alive([p]) and p.cmdline() != ["sleep", "0.05"]]


def _guard_of(proc: ManagedProcess) -> psutil.Process:
    guard = psutil.Process(proc.pid).parent()
    assert guard is not None
    return guard


async def _wait_gone(procs: list[psutil.Process], within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := alive(procs)) and time.monotonic() < deadline:  # noqa: ASYNC110
        await anyio.sleep(0.01)
    return left


async def test_trees_from_one_server_are_independent(tmp_path: Path) -> None:
    first, first_tree = await _ready_tree(tmp_path)
    second, second_tree = await _ready_tree(tmp_path)
    server = guard_server_pid()
    assert server is not None
    assert psutil.Process(server).ppid() == os.getpid()
    # Each product has a guard of its own, forked by the one server; groups are apart.
    guards = {_guard_of(first).pid, _guard_of(second).pid}
    assert len(guards) == 2
    assert {psutil.Process(g).ppid() for g in guards} == {server}
    assert os.getpgid(first.pid) != os.getpgid(second.pid)
    assert server not in first.tree_pids() | second.tree_pids()

    assert await first.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(first_tree)
    survivors = _long_lived(second_tree)
    assert len(survivors) >= 4  # guard, product, setsid shell, sleep 60
    assert alive(survivors) == survivors  # terminating one tree left the other intact
    assert second.exit_facts is None
    assert await second.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(second_tree)
    assert guard_server_pid() == server  # still the same server


async def test_server_survives_a_product_crash(tmp_path: Path) -> None:
    async with await spawn(sh("kill -SEGV $$", tmp_path)) as crashed:
        assert await crashed.wait() == ExitFacts(exit_code=None, signal="SIGSEGV")
    server = guard_server_pid()
    assert server is not None
    async with await spawn(sh("exit 3", tmp_path)) as proc:
        assert await proc.wait() == ExitFacts(exit_code=3, signal=None)
    assert guard_server_pid() == server


async def test_orphans_of_a_killed_guard_are_killed_by_the_server(tmp_path: Path) -> None:
    # The server is a subreaper too: a tree whose guard was SIGKILLed is re-parented to
    # it, and it kills that tree rather than letting it run unattributed.
    proc, tree = await _ready_tree(tmp_path)
    other, other_tree = await _ready_tree(tmp_path)
    server = guard_server_pid()
    _guard_of(proc).kill()
    assert await _wait_gone(tree, _HANG_GUARD_SECONDS) == []
    assert guard_server_pid() == server
    assert len(_long_lived(other_tree)) >= 4
    await proc.terminate()
    await other.terminate()
    assert not alive(other_tree)


async def test_killing_the_server_kills_its_trees_and_the_next_spawn_starts_another(
    tmp_path: Path,
) -> None:
    proc, tree = await _ready_tree(tmp_path, grace=5)
    server = guard_server_pid()
    assert server is not None
    psutil.Process(server).kill()
    # Every guard sees the server's pipe close and kills its tree (setsid grandchild too).
    assert await _wait_gone(tree, _HANG_GUARD_SECONDS) == []
    with anyio.fail_after(_HANG_GUARD_SECONDS):
        await proc.wait_tree_exit()
    assert (await proc.terminate()).exit_code is None
    async with await spawn(sh("echo again; sleep 60", tmp_path)) as again:
        assert again.stdout is not None
        assert await again.stdout.receive() == b"again\n"
        new_server = guard_server_pid()
        assert new_server is not None
        assert new_server != server
        assert _guard_of(again).ppid() == new_server


async def test_shutdown_stops_the_server_and_the_next_spawn_starts_another(
    tmp_path: Path,
) -> None:
    async with await spawn(sh("exit 0", tmp_path)) as proc:
        await proc.wait()
    server = guard_server_pid()
    assert server is not None
    handle = psutil.Process(server)
    shutdown_guard_server()
    assert not alive([handle])
    assert guard_server_pid() is None
    shutdown_guard_server()  # nothing to do: no error
    async with await spawn(sh("exit 0", tmp_path)) as proc:
        await proc.wait()
    assert guard_server_pid() not in (None, server)


async def test_shutdown_kills_the_trees_the_server_still_guards(tmp_path: Path) -> None:
    proc, tree = await _ready_tree(tmp_path)
    shutdown_guard_server()
    assert _running(tree) == []  # gone when it returns, guards included
    await proc.terminate()


async def test_shutdown_of_a_hung_server_returns_once_its_guards_and_trees_are_gone(
    tmp_path: Path,
) -> None:
    # A server that does not exit in time is SIGKILLed; its guards then end their trees
    # by themselves (they watch it), and the host that stopped it waits for them too. The
    # guard is stopped as well (a loaded machine may not run it for a while): what is
    # still running after the bound is SIGKILLed by the host.
    proc, tree = await _ready_tree(tmp_path)
    server = guard_server_pid()
    assert server is not None
    os.kill(server, signal.SIGSTOP)
    _guard_of(proc).suspend()
    shutdown_guard_server()
    assert _running(tree) == []
    assert _running(snapshot([server])) == []
    await proc.terminate()


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Not yet a zombie: one still in the kernel's exit path counts (a check at a moment)."""
    running = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.NoSuchProcess:
            continue
    return running


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_fifty_spawns_leak_no_fd(tmp_path: Path) -> None:
    async with await spawn(sh("exit 0", tmp_path)) as warm:  # the server's own fds
        await warm.wait()
    before = _open_fds()
    for i in range(50):
        spec = sh(
            "read line; echo $line; echo err >&2", tmp_path, stderr="pipe" if i % 2 else "devnull"
        )
        async with await spawn(spec, stderr_observer=lambda line: None) as proc:
            assert proc.stdin is not None
            assert proc.stdout is not None
            await proc.stdin.send(b"x\n")
            assert await proc.stdout.receive() == b"x\n"
            await proc.wait()
    assert _open_fds() == before


async def test_server_fds_are_not_inherited_by_other_children(tmp_path: Path) -> None:
    async with await spawn(sh("exit 0", tmp_path)) as proc:
        await proc.wait()
    code = "import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
    for guard in (True, False):
        spec = SpawnSpec(
            argv=(sys.executable, "-c", code), cwd=str(tmp_path), host_death_guard=guard
        )
        async with await spawn(spec) as proc:
            assert proc.stdout is not None
            out = b""
            async for chunk in proc.stdout:
                out += chunk
        assert json.loads(out) == [0, 1, 2, 3]  # stdio and listdir's own fd


@pytest.mark.parametrize("served", [True, False], ids=["served", "per-spawn"])
async def test_wait_returns_once_the_guard_of_an_emptied_tree_has_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: bool
) -> None:
    # The guard reports the exit, then reaps and exits: a caller acting on wait() (a
    # delegation's result) must find nothing of the run alive. The window is short, so
    # many runs make a guard still alive at wait() show (a few in 200 served ones on an
    # idle host; a per-spawn guard costs an interpreter start, so fewer of those).
    if not served:
        monkeypatch.setattr(_guard_server, "_start", lambda: None)
    guards_alive = []
    for _ in range(200 if served else 40):
        proc = await spawn(sh("read line; exit 3", tmp_path, stdin="pipe", stdout="devnull"))
        guard = _guard_of(proc)  # the product waits for its stdin: the guard is there
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with anyio.fail_after(_HANG_GUARD_SECONDS):
            assert await proc.wait() == ExitFacts(exit_code=3, signal=None)
        guards_alive += [p.pid for p in alive([guard])]
        await proc.terminate()
    assert guards_alive == []
    assert (guard_server_pid() is not None) is served


async def test_no_server_falls_back_to_a_guard_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_guard_server, "_start", lambda: None)
    async with await spawn(sh("echo ready; sleep 60", tmp_path)) as proc:
        assert proc.stdout is not None
        await proc.stdout.receive()
        assert _guard_of(proc).ppid() == os.getpid()  # a per-spawn guard, our own child
        assert guard_server_pid() is None


async def test_an_oversized_request_falls_back_to_a_guard_of_its_own(tmp_path: Path) -> None:
    # Several variables: one string may not exceed the kernel's 128 KiB per argument.
    chunk = "x" * 60_000
    env: dict[str, str | None] = {f"BIG{i}": chunk for i in range(4)}
    assert sum(map(len, env)) + 4 * len(chunk) > _guard_server.MAX_REQUEST_BYTES
    async with await spawn(sh("echo ${#BIG3}; sleep 60", tmp_path, env=env)) as proc:
        assert proc.stdout is not None
        assert await proc.stdout.receive() == b"60000\n"
        assert _guard_of(proc).ppid() == os.getpid()


async def test_a_server_lost_before_forking_the_guard_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await spawn(sh("exit 0", tmp_path)) as proc:
        await proc.wait()
    original_send = _guard_server.GuardServer.send

    def send_then_die(self: _guard_server.GuardServer, payload: bytes, fds: list[int]) -> None:
        os.kill(self.pid, signal.SIGSTOP)  # it must not fork the guard before it dies
        original_send(self, payload, fds)
        os.kill(self.pid, signal.SIGKILL)

    monkeypatch.setattr(_guard_server.GuardServer, "send", send_then_die)
    async with await spawn(sh("echo ready; sleep 60", tmp_path)) as proc:
        assert proc.stdout is not None
        assert await proc.stdout.receive() == b"ready\n"
        assert _guard_of(proc).ppid() == os.getpid()
    assert guard_server_pid() is None


# The host spawns a tree, forks, and the child spawns another; each reports its
# server's pid and the parent of its guard. The parent's server must keep serving.
_FORKING_HOST = """
import json, os, sys
import anyio
from dsh_subprocess import SpawnSpec, _guard_server, guard_server_pid, spawn

async def one(cwd):
    spec = SpawnSpec(argv=("/bin/sh", "-c", "echo ready; sleep 60"), cwd=cwd)
    async with await spawn(spec) as proc:
        await proc.stdout.receive()
    import psutil
    return {"host": os.getpid(), "server": guard_server_pid(),
            "server_parent": psutil.Process(guard_server_pid()).ppid()}

_guard_server.enabled = True
cwd = sys.argv[1]
before = anyio.run(one, cwd)
child = os.fork()
if child == 0:
    result = anyio.run(one, cwd)
    print(json.dumps({"child": result}), flush=True)
    os._exit(0)
os.waitpid(child, 0)
after = anyio.run(one, cwd)
print(json.dumps({"before": before, "after": after}), flush=True)
"""


async def test_a_forked_host_gets_its_own_server(tmp_path: Path) -> None:
    host_py = tmp_path / "host.py"
    host_py.write_text(_FORKING_HOST)
    spec = SpawnSpec(
        argv=(sys.executable, str(host_py), str(tmp_path)),
        cwd=str(tmp_path),
        stdin="devnull",
        stderr="pipe",
        host_death_guard=False,
    )
    errors: list[str] = []
    async with await spawn(spec, stderr_observer=errors.append) as host:
        assert host.stdout is not None
        out = b""
        with anyio.fail_after(30):
            async for chunk in host.stdout:
                out += chunk
        facts = await host.wait()
    assert facts == ExitFacts(exit_code=0, signal=None), "\n".join(errors)
    lines = [json.loads(line) for line in out.splitlines()]
    child = lines[0]["child"]
    parent = lines[1]
    assert parent["before"]["server"] == parent["after"]["server"]  # unaffected by the fork
    assert parent["before"]["server_parent"] == parent["before"]["host"]
    assert child["server"] not in (None, parent["before"]["server"])
    assert child["server_parent"] == child["host"]
    # The child's server is gone: the child's end closed its lifeline.
    assert await _wait_gone(snapshot([child["server"]]), _HANG_GUARD_SECONDS) == []


async def test_host_exit_shuts_the_server_down(tmp_path: Path) -> None:
    script = (
        "import anyio\n"
        "from dsh_subprocess import SpawnSpec, _guard_server, guard_server_pid, spawn\n"
        "async def main():\n"
        "    _guard_server.enabled = True\n"
        f"    async with await spawn(SpawnSpec(argv=('true',), cwd={str(tmp_path)!r})) as p:\n"
        "        await p.wait()\n"
        "    print(guard_server_pid(), flush=True)\n"
        "    input()\n"
        "anyio.run(main)\n"
    )
    spec = SpawnSpec(argv=(sys.executable, "-c", script), cwd=str(tmp_path), host_death_guard=False)
    async with await spawn(spec) as host:
        assert host.stdout is not None
        assert host.stdin is not None
        with anyio.fail_after(30):
            line = await host.stdout.receive()
        server = snapshot([int(line)])
        assert alive(server) == server
        await host.stdin.send(b"exit now\n")
        assert await host.wait() == ExitFacts(exit_code=0, signal=None)
        assert await _wait_gone(server, _HANG_GUARD_SECONDS) == []
