"""Termination of whole trees, tree liveness and exit facts, with real processes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subprocess import ExitFacts, ManagedProcess, SpawnSpec, guard_server_pid, spawn
from dsh_subprocess.testing import alive, snapshot

pytestmark = pytest.mark.anyio

# Prints one line once the traps are in place, so signals are never sent too early.
_TERM_IGNORING = "trap '' TERM; echo ready; while :; do sleep 0.05; done"


def sh(script: str, cwd: Path, **fields: object) -> SpawnSpec:
    return SpawnSpec.model_validate({"argv": ("/bin/sh", "-c", script), "cwd": str(cwd), **fields})


async def _read_line(proc: ManagedProcess) -> bytes:
    assert proc.stdout is not None
    data = b""
    with anyio.fail_after(10):
        while not data.endswith(b"\n"):
            data += await proc.stdout.receive()
    return data


async def _wait_for_tree_size(proc: ManagedProcess, minimum: int) -> frozenset[int]:
    with anyio.fail_after(10):
        while len(pids := proc.tree_pids()) < minimum:  # noqa: ASYNC110 - polling a process table
            await anyio.sleep(0.01)
    return pids


async def test_tree_with_grandchildren_dies_on_terminate(tmp_path: Path, guarded: bool) -> None:
    script = "sh -c 'sleep 60 & sleep 60 & wait' & sleep 60 & echo ready; wait"
    proc = await spawn(sh(script, tmp_path, host_death_guard=guarded, grace=5))
    await _read_line(proc)
    pids = await _wait_for_tree_size(proc, 5 + guarded)
    procs = snapshot(pids)
    started = time.monotonic()
    facts = await proc.terminate()
    elapsed = time.monotonic() - started
    assert facts == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(procs)
    assert not proc.tree_alive()
    assert proc.tree_pids() == frozenset()
    assert elapsed < 2.0  # SIGTERM was honoured: no wait for the 5 s grace


async def test_term_ignoring_child_is_killed_after_grace(tmp_path: Path, guarded: bool) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=0.3))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    started = time.monotonic()
    facts = await proc.terminate()
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 3.0
    assert facts.signal == "SIGKILL" or facts.exit_code is not None  # see the next assertion
    if guarded:
        # Under the guard the product itself is SIGKILLed first and the guard reports it.
        assert facts == ExitFacts(exit_code=None, signal="SIGKILL")
    assert not alive(procs)
    assert not proc.tree_alive()


async def test_setsid_grandchild_holding_stdout_is_killed(tmp_path: Path, guarded: bool) -> None:
    # The grandchild ignores TERM, leaves the group and keeps our stdout pipe open.
    script = (
        "setsid sh -c \"trap '' TERM; echo grandchild; while :; do sleep 0.05; done\" & "
        "echo ready; wait"
    )
    proc = await spawn(sh(script, tmp_path, host_death_guard=guarded, grace=0.3))
    assert proc.stdout is not None
    seen = b""
    with anyio.fail_after(10):
        while b"grandchild" not in seen or b"ready" not in seen:
            seen += await proc.stdout.receive()
    procs = snapshot(await _wait_for_tree_size(proc, 3 + guarded))
    sessions = {p.pid: os.getsid(p.pid) for p in procs}
    assert len(set(sessions.values())) >= 2  # someone really left the session
    await proc.terminate()
    assert not alive(procs)
    assert not proc.tree_alive()


async def test_double_forked_daemon_is_caught_by_the_guard(tmp_path: Path) -> None:
    # Without the guard a double-forked daemon is re-parented away before anyone can
    # see it; the guard is a subreaper, so it stays inside the tree.
    script = (
        "(setsid sh -c \"trap '' TERM; while :; do sleep 0.05; done\" "
        "</dev/null >/dev/null 2>&1 &); echo ready; exec sleep 60"
    )
    proc = await spawn(sh(script, tmp_path, grace=0.3))
    await _read_line(proc)
    pids = await _wait_for_tree_size(proc, 4)  # guard, product, daemon sh, its sleep
    procs = snapshot(pids)
    guard = psutil.Process(proc.pid).parent()
    assert guard is not None
    daemon_parents = {p.ppid() for p in procs if p.pid not in (proc.pid, guard.pid)}
    assert guard.pid in daemon_parents  # re-parented to the guard, not to init
    facts = await proc.terminate()
    assert facts == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(procs)


async def test_exit_code_and_signal_are_independent_facts(tmp_path: Path, guarded: bool) -> None:
    async with await spawn(sh("exit 7", tmp_path, host_death_guard=guarded)) as proc:
        assert await proc.wait() == ExitFacts(exit_code=7, signal=None)
        assert proc.exit_facts == ExitFacts(exit_code=7, signal=None)
    async with await spawn(sh("kill -USR1 $$", tmp_path, host_death_guard=guarded)) as proc:
        assert await proc.wait() == ExitFacts(exit_code=None, signal="SIGUSR1")
    async with await spawn(sh("exit 0", tmp_path, host_death_guard=guarded)) as proc:
        assert await proc.wait() == ExitFacts(exit_code=0, signal=None)
    assert not proc.tree_alive()


async def test_exit_facts_absent_while_running(tmp_path: Path, guarded: bool) -> None:
    proc = await spawn(sh("echo ready; sleep 60", tmp_path, host_death_guard=guarded))
    await _read_line(proc)
    assert proc.exit_facts is None
    assert proc.tree_alive()
    assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert proc.exit_facts == ExitFacts(exit_code=None, signal="SIGTERM")


async def test_wait_returns_when_product_exits_while_a_descendant_lives(tmp_path: Path) -> None:
    script = "sh -c 'echo escaped; sleep 60' & sleep 0.2; exit 5"
    proc = await spawn(sh(script, tmp_path, stdout="devnull"))
    with anyio.fail_after(5):
        facts = await proc.wait()
    assert facts == ExitFacts(exit_code=5, signal=None)
    assert proc.tree_alive()  # the sleep survives its parent
    pids = proc.tree_pids()
    assert proc.pid not in pids
    with anyio.move_on_after(0.2):
        await proc.wait_tree_exit()
    assert proc.tree_alive()  # wait_tree_exit sends nothing
    procs = snapshot(pids)
    assert await proc.terminate() == facts
    assert not alive(procs)


async def test_terminate_is_idempotent_and_concurrent_calls_share_one_outcome(
    tmp_path: Path, guarded: bool
) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=0.3))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    results: list[ExitFacts] = []

    async def one() -> None:
        results.append(await proc.terminate())

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
    results.append(await proc.terminate())
    assert len(results) == 6
    assert len(set(results)) == 1
    assert not alive(procs)


async def test_terminate_survives_cancellation_of_the_awaiting_task(
    tmp_path: Path, guarded: bool
) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=0.3))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    with anyio.move_on_after(0.05) as scope:
        await proc.terminate()
    # The shield kept the teardown going; the cancellation is delivered only after it.
    assert scope.cancelled_caught
    assert not alive(procs)
    assert not proc.tree_alive()


async def test_fifty_concurrent_spawns_are_all_reaped(tmp_path: Path) -> None:
    procs: list[ManagedProcess] = []

    async def start(i: int) -> None:
        script = "echo ready; sleep 60" if i % 2 else "echo ready; exit 0"
        procs.append(await spawn(sh(script, tmp_path)))

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(start, i)
    everyone = snapshot(pid for p in procs for pid in p.tree_pids())
    async with anyio.create_task_group() as tg:
        for p in procs:
            tg.start_soon(p.terminate)
    assert not alive(everyone)
    assert not any(p.tree_alive() for p in procs)
    assert {p.exit_facts for p in procs} == {
        ExitFacts(exit_code=0, signal=None),
        ExitFacts(exit_code=None, signal="SIGTERM"),
    }


async def test_a_product_that_left_the_group_still_gets_sigterm(tmp_path: Path) -> None:
    script = "import os, sys, time; os.setsid(); print('ready', flush=True); time.sleep(60)"
    proc = await spawn(SpawnSpec(argv=(sys.executable, "-c", script), cwd=str(tmp_path), grace=5))
    await _read_line(proc)
    started = time.monotonic()
    assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert time.monotonic() - started < 2.0


async def test_host_exit_kill_path_kills_at_once(tmp_path: Path, guarded: bool) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=60))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    proc.kill_tree_now()
    with anyio.fail_after(2):
        await proc.wait_tree_exit()
    assert not alive(procs)
    proc.kill_tree_now()  # a second call after the tree has gone sends nothing
    facts = await proc.terminate()
    if guarded:
        # The guard may die before it reaps the product; then nothing is known, and
        # nothing is inferred from the guard's own end.
        assert facts in (ExitFacts(None, "SIGKILL"), ExitFacts(None, None))
    else:
        assert facts == ExitFacts(None, "SIGKILL")


async def test_cancelling_spawn_leaves_nothing_running(tmp_path: Path, guarded: bool) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with anyio.move_on_after(0):
        await spawn(sh("sleep 60", tmp_path, host_death_guard=guarded))
        pytest.fail("spawn was not cancelled")
    # The guard server (started by this spawn) is the host's helper, not the spawn's.
    before.add(guard_server_pid() or -1)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert alive(left) == []


async def test_signal_names_come_from_the_signal_module(tmp_path: Path) -> None:
    async with await spawn(sh("kill -HUP $$", tmp_path)) as proc:
        facts = await proc.wait()
    assert facts.signal == signal.Signals.SIGHUP.name


async def test_guard_works_when_the_host_has_fds_above_fd_setsize(tmp_path: Path) -> None:
    # The status and lifeline fds keep their numbers in the guard; select() would fail.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        proc = await spawn(sh("echo ready; sleep 60", tmp_path))
        await _read_line(proc)
        procs = snapshot(proc.tree_pids())
        assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
        assert not alive(procs)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_waiters_in_other_tasks_see_the_end_of_a_terminate(
    tmp_path: Path, guarded: bool
) -> None:
    # Several tasks wait (one of them on the status pipe) while another tears down.
    proc = await spawn(sh("echo ready; sleep 60", tmp_path, host_death_guard=guarded))
    await _read_line(proc)
    seen: list[ExitFacts] = []

    async def waiter() -> None:
        seen.append(await proc.wait())
        await proc.wait_tree_exit()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()  # the waiters are blocked first
            facts = await proc.terminate()
    assert seen == [facts] * 3
    assert facts == ExitFacts(exit_code=None, signal="SIGTERM")
