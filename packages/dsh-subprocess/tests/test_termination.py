"""Termination of whole trees, tree liveness and exit facts, with real processes."""

from __future__ import annotations

import contextlib
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
    spawn,
)
from dsh_subprocess.testing import ProcessWatch, alive, snapshot

pytestmark = pytest.mark.anyio

# A hang guard, not a timing: the trees waited on would live for a minute or forever
# unless something killed them, so getting past it at all is the event asserted.
_HANG_GUARD_SECONDS = 30.0

# Prints one line once the traps are in place, so signals are never sent too early.
_TERM_IGNORING = "trap '' TERM; echo ready; while :; do sleep 0.05; done"

# An escapee in a session (and group) of its own: it records a SIGTERM in $EVENTS, then
# exits ("honour") or carries on ("ignore"), and says "escaped" once its trap is set.
_ESCAPEE = """trap 'echo got TERM >> "$EVENTS"; [ "$1" = honour ] && exit 0' TERM
echo escaped
while :; do sleep 0.05; done
"""


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


async def test_tree_with_grandchildren_dies_on_terminate(
    tmp_path: Path, guarded: bool, sent_signals: list[int]
) -> None:
    script = "sh -c 'sleep 60 & sleep 60 & wait' & sleep 60 & echo ready; wait"
    proc = await spawn(sh(script, tmp_path, host_death_guard=guarded, grace=_HANG_GUARD_SECONDS))
    await _read_line(proc)
    pids = await _wait_for_tree_size(proc, 5 + guarded)
    procs = snapshot(pids)
    facts = await proc.terminate()
    assert facts == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(procs)
    assert not proc.tree_alive()
    assert proc.tree_pids() == frozenset()
    assert sent_signals == [signal.SIGTERM]  # honoured: no escalation was needed


async def test_term_ignoring_child_is_killed_after_grace(
    tmp_path: Path, guarded: bool, sent_signals: list[int]
) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=0.3))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    started = time.monotonic()
    facts = await proc.terminate()
    assert time.monotonic() - started >= 0.3  # the grace is waited out first
    assert sent_signals[0] == signal.SIGTERM
    assert set(sent_signals[1:]) == {signal.SIGKILL}  # then escalated
    assert facts.signal == "SIGKILL" or facts.exit_code is not None  # see the next assertion
    if guarded:
        # Under the guard the product itself is SIGKILLed first and the guard reports it.
        assert facts == ExitFacts(exit_code=None, signal="SIGKILL")
    assert not alive(procs)
    assert not proc.tree_alive()


async def _escapee_tree(
    tmp_path: Path, guarded: bool, *, honour: bool, grace: float
) -> tuple[ManagedProcess, list[psutil.Process]]:
    """A product whose child called setsid (and holds our stdout), both ready for signals."""
    escapee = tmp_path / "escapee.sh"
    escapee.write_text(_ESCAPEE)
    mode = "honour" if honour else "ignore"
    script = f'setsid /bin/sh "$ESCAPEE" {mode} & echo ready; wait'
    env = {"ESCAPEE": str(escapee), "EVENTS": str(tmp_path / "events")}
    proc = await spawn(sh(script, tmp_path, host_death_guard=guarded, grace=grace, env=env))
    assert proc.stdout is not None
    seen = b""
    with anyio.fail_after(10):
        while b"escaped" not in seen or b"ready" not in seen:
            seen += await proc.stdout.receive()
    procs = snapshot(await _wait_for_tree_size(proc, 3 + guarded))
    sessions = {p.pid: os.getsid(p.pid) for p in procs}
    assert len(set(sessions.values())) >= 2  # someone really left the session
    return proc, procs


async def test_setsid_grandchild_holding_stdout_gets_term_then_kill(
    tmp_path: Path, guarded: bool, sent_signals: list[int]
) -> None:
    # The grandchild leaves the group, keeps our stdout open and ignores SIGTERM.
    proc, procs = await _escapee_tree(tmp_path, guarded, honour=False, grace=0.3)
    await proc.terminate()
    assert not alive(procs)
    assert not proc.tree_alive()
    # It was asked to stop before the grace ran out and was killed only after that.
    assert (tmp_path / "events").read_text() == "got TERM\n"
    assert sent_signals[0] == signal.SIGTERM
    assert signal.SIGKILL in sent_signals


async def test_setsid_grandchild_that_honours_term_ends_without_a_kill(
    tmp_path: Path, guarded: bool, sent_signals: list[int]
) -> None:
    # A long grace: had the escapee not been sent SIGTERM, only the SIGKILL after the
    # grace would have ended it, and it would have recorded nothing.
    proc, procs = await _escapee_tree(tmp_path, guarded, honour=True, grace=_HANG_GUARD_SECONDS)
    facts = await proc.terminate()
    assert facts == ExitFacts(exit_code=None, signal="SIGTERM")
    assert not alive(procs)
    assert not proc.tree_alive()
    assert (tmp_path / "events").read_text() == "got TERM\n"
    assert signal.SIGKILL not in sent_signals  # the tree ended on SIGTERM alone


@pytest.mark.skipif(
    sys.platform != "linux", reason="the Linux guard is a subreaper; see test_portable_guard.py"
)
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
    daemon_parents = set()
    for member in procs:
        if member.pid not in (proc.pid, guard.pid):
            # The daemon's `sleep 0.05` comes and goes: one may have exited since.
            with contextlib.suppress(psutil.NoSuchProcess):
                daemon_parents.add(member.ppid())
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
    with anyio.fail_after(_HANG_GUARD_SECONDS):
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


@pytest.mark.parametrize("served", [True, False], ids=["server", "per-spawn"])
async def test_a_product_that_left_the_group_still_gets_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: bool, sent_signals: list[int]
) -> None:
    # Only under a guard can the product leave the group: started directly it leads its
    # own session, and setsid() is refused to a session leader.
    monkeypatch.setattr(_guard_server, "enabled", served)
    script = "import os, sys, time; os.setsid(); print('ready', flush=True); time.sleep(60)"
    spec = SpawnSpec(argv=(sys.executable, "-c", script), cwd=str(tmp_path), grace=60)
    proc = await spawn(spec)
    await _read_line(proc)
    assert await proc.terminate() == ExitFacts(exit_code=None, signal="SIGTERM")
    assert signal.SIGKILL not in sent_signals


async def test_host_exit_kill_path_kills_at_once(
    tmp_path: Path, guarded: bool, sent_signals: list[int]
) -> None:
    proc = await spawn(sh(_TERM_IGNORING, tmp_path, host_death_guard=guarded, grace=60))
    await _read_line(proc)
    procs = snapshot(proc.tree_pids())
    proc.kill_tree_now()
    with anyio.fail_after(_HANG_GUARD_SECONDS):
        await proc.wait_tree_exit()
    assert not alive(procs)
    assert set(sent_signals) == {signal.SIGKILL}  # no SIGTERM, no grace
    sent_before = len(sent_signals)
    proc.kill_tree_now()  # a second call after the tree has gone sends nothing
    assert len(sent_signals) == sent_before
    facts = await proc.terminate()
    if guarded:
        # The guard may die before it reaps the product; then nothing is known, and
        # nothing is inferred from the guard's own end.
        assert facts in (ExitFacts(None, "SIGKILL"), ExitFacts(None, None))
    else:
        assert facts == ExitFacts(None, "SIGKILL")


async def test_cancelling_spawn_leaves_nothing_running(tmp_path: Path, guarded: bool) -> None:
    watch = ProcessWatch()
    with anyio.move_on_after(0):
        await spawn(sh("sleep 60", tmp_path, host_death_guard=guarded))
        pytest.fail("spawn was not cancelled")
    # The guard server (started by this spawn) is the host's helper, not the spawn's:
    # the watch leaves it out.
    assert watch.alive() == []


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
