"""ProcessWatch: what a test started since its baseline, seen even when it escaped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from dsh_subprocess.testing import (
    ProcessWatch,
    become_subreaper,
    host_descendants,
    reap_adopted_zombies,
)

# Raw children on purpose: the watch must see processes no dsh_subprocess handle owns.
Child = subprocess.Popen  # noqa: TID251

# The middle process starts a grandchild in a session of its own, prints its pid and
# exits: the grandchild is an orphan that only a subreaper keeps in its tree.
_ESCAPE = """
import subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, start_new_session=True)
print(child.pid, flush=True)
"""


@pytest.fixture
def subreaper() -> None:
    assert become_subreaper()


def _escape(argv: list[str], **popen: object) -> psutil.Process:
    """Start ``argv`` as an escaped grandchild; its handle once the middle has exited."""
    middle = subprocess.run(
        [sys.executable, "-c", _ESCAPE, *argv],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
        **popen,  # type: ignore[call-overload]
    )
    return psutil.Process(int(middle.stdout))


@pytest.fixture
def sleeper() -> Iterator[Child[bytes]]:
    proc = Child(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.usefixtures("subreaper")
def test_an_escaped_grandchild_is_seen_and_described_with_pid_and_argv() -> None:
    watch = ProcessWatch()
    escaped = _escape(["sleep", "300"])
    assert escaped.ppid() == os.getpid()  # adopted, not lost under init
    assert [(s.pid, s.argv) for s in watch.alive()] == [(escaped.pid, ("sleep", "300"))]
    assert watch.kill_leftovers() == [f"{escaped.pid} (sleep) sleep 300"]
    assert watch.alive() == []
    assert not escaped.is_running()


def test_a_clean_tree_reports_nothing_and_the_baseline_is_not_reported(
    sleeper: Child[bytes],
) -> None:
    watch = ProcessWatch()  # ``sleeper`` runs already: it is part of the baseline
    subprocess.run(["true"], check=True)
    assert watch.alive() == []
    assert watch.wait_gone(within=0) == []
    assert watch.kill_leftovers() == []
    assert watch.seen == ()
    assert sleeper.poll() is None  # the baseline was not killed


@pytest.mark.usefixtures("subreaper")
def test_an_adopted_zombie_counts_as_gone_and_is_reaped() -> None:
    read_end, write_end = os.pipe()
    watch = ProcessWatch()
    try:
        escaped = _escape(["cat"], stdin=read_end)
    finally:
        os.close(read_end)
    assert escaped.ppid() == os.getpid()
    assert [s.pid for s in watch.alive()] == [escaped.pid]
    os.close(write_end)  # cat sees end of input and exits; nobody but us can reap it
    assert watch.wait_gone(within=60) == []
    assert escaped.status() == psutil.STATUS_ZOMBIE
    reap_adopted_zombies()
    with pytest.raises(psutil.NoSuchProcess):
        escaped.status()


def test_wait_gone_returns_what_still_runs_and_waits_for_what_exits() -> None:
    watch = ProcessWatch()
    stays = Child(["sleep", "300"])
    exits: Child[bytes] | None = None
    try:
        assert [s.pid for s in watch.wait_gone(within=0)] == [stays.pid]
        exits = Child(["cat"], stdin=subprocess.PIPE)
        stays.kill()
        assert exits.stdin is not None
        exits.stdin.close()  # cat exits at end of input: wait_gone waits for that exit
        assert watch.wait_gone(within=60) == []
    finally:
        stays.kill()
        stays.wait()
        if exits is not None:
            exits.wait()
    assert watch.seen[0].pid == stays.pid  # cat may have exited before it was ever listed


def test_the_sampling_thread_remembers_a_process_that_came_and_went() -> None:
    with ProcessWatch() as watch:
        argv = (sys.executable, "-c", "input()")
        proc = Child(list(argv), stdin=subprocess.PIPE)
        deadline = time.monotonic() + 60

        def sighted() -> list[tuple[str, ...]]:
            return [s.argv for s in watch.seen if s.pid == proc.pid]

        # A first sighting may predate the exec (the parent's argv): wait for the real one.
        while sighted() != [argv] and time.monotonic() < deadline:
            time.sleep(0.01)  # the sampler has no event to wait on
        proc.communicate(b"\n")
    # An exited process reads as an empty argv: the last real sighting is kept.
    assert sighted() == [argv]
    assert watch.alive() == []


def test_product_roots_are_only_the_new_ones(sleeper: Child[bytes]) -> None:
    watch = ProcessWatch()
    new = Child(["sleep", "300"])
    try:
        assert [p.pid for p in watch.product_roots()] == [new.pid]
    finally:
        new.kill()
        new.wait()


def test_a_long_command_line_is_kept_bounded() -> None:
    watch = ProcessWatch()
    argv = [sys.executable, "-c", "input()", *(["x" * 500] * 20)]
    proc = Child(argv, stdin=subprocess.PIPE)
    try:
        (seen,) = watch.alive()
        assert seen.argv == (sys.executable[:120], "-c", "input()", *(["x" * 120] * 5))
        assert str(seen).startswith(f"{proc.pid} (")
    finally:
        proc.communicate(b"\n")


def test_the_guard_server_is_never_listed_even_when_a_sample_caught_it_unregistered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen in a full suite: a sample listed the server (started meanwhile) as a new
    # process, and every later check listed it as a survivor. The server is the host's
    # long-lived helper, so a watch leaves it out by its pid at the time of the check.
    import dsh_subprocess.testing as testing
    from dsh_subprocess import _guard_server

    shutdown = _guard_server.shutdown_guard_server
    shutdown()
    watch = ProcessWatch()
    server = _guard_server.acquire()
    assert server is not None
    monkeypatch.setattr(testing, "guard_server_pids", frozenset)  # not registered yet
    server_children = testing._server_children
    monkeypatch.setattr(testing, "_server_children", lambda found: frozenset())
    assert [seen.pid for seen in watch.alive()] == [server.pid]
    monkeypatch.setattr(testing, "guard_server_pids", _guard_server.guard_server_pids)
    monkeypatch.setattr(testing, "_server_children", server_children)
    assert watch.alive() == []
    assert server.alive()
    shutdown()


def test_a_guard_server_being_replaced_is_never_listed() -> None:
    # The flake: a leftover check listed the host's `_guard.py serve` process. A server
    # that stops answering is forgotten (no longer the current one) and waited for while
    # a new one starts; a sample in that window saw the old one as a new process and
    # every check until it was reaped listed it. Both are the host's own helpers.
    from dsh_subprocess import _guard_server

    _guard_server.shutdown_guard_server()
    watch = ProcessWatch()
    old = _guard_server.acquire()
    assert old is not None
    try:
        with _guard_server._lock:  # what forget() does before it waits for the old one
            _guard_server._current = None
        assert watch.alive() == []  # sampled while no server is the current one
        new = _guard_server.acquire()
        assert new is not None
        assert new.pid != old.pid
        assert old.alive()
        assert new.alive()
        assert watch.alive() == []
        assert {seen.pid for seen in watch.seen} & {old.pid, new.pid} == set()
    finally:
        old.close()
        old.wait(5)
        _guard_server.shutdown_guard_server()
    assert watch.alive() == []


def test_a_server_the_registry_does_not_hold_is_still_never_listed() -> None:
    # The flake came back once after the registry fix: a full suite listed the host's own
    # `_guard.py serve` child. A direct child of the host with the server's argv is a
    # server whatever the registry held when it was read; here one is started by hand.
    from dsh_subprocess import _guard_server

    watch = ProcessWatch()
    host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lifeline_r, lifeline_w = os.pipe()
    argv = [sys.executable, "-I", "-S", _guard_server.GUARD_PATH, "serve"]
    server = subprocess.Popen(  # noqa: TID251 - a server the registry never saw
        [*argv, str(server_end.fileno()), str(lifeline_r)],
        pass_fds=(server_end.fileno(), lifeline_r),
        start_new_session=True,
    )
    server_end.close()
    os.close(lifeline_r)
    try:
        assert server.pid not in _guard_server.guard_server_pids()
        assert psutil.Process(server.pid).ppid() == os.getpid()
        assert watch.alive() == []
        assert server.pid not in {proc.pid for proc in host_descendants()}
    finally:
        host_end.close()
        os.close(lifeline_w)  # the server's lifeline ends: it exits
        server.wait(30)
    assert watch.alive() == []


def test_a_process_that_released_its_memory_is_exiting_not_left_over(
    monkeypatch: pytest.MonkeyPatch, sleeper: Child[bytes]
) -> None:
    # A served guard closes the status pipe the host waits on before it becomes a zombie;
    # caught in between it has no address space (virtual size 0) and runs no more code.
    # The kernel gives no way to hold a process there, so its memory reading is faked.
    watch = ProcessWatch()
    assert [seen.pid for seen in watch.alive()] == []  # started before the baseline
    second = Child(["sleep", "300"])
    try:
        assert [seen.pid for seen in watch.alive()] == [second.pid]
        real = psutil.Process.memory_info

        def released(self: psutil.Process) -> object:
            info = real(self)
            return info._replace(vms=0) if self.pid == second.pid else info

        monkeypatch.setattr(psutil.Process, "memory_info", released)
        assert watch.alive() == []
    finally:
        second.kill()
        second.wait()
