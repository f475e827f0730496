"""``ManagedProcess.stdout_until_exit``: EOF, or the product's exit plus a drain window."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from dsh_subprocess import ManagedProcess, SpawnSpec, StdoutUntilExit, spawn

pytestmark = pytest.mark.anyio


def sh(script: str, cwd: Path, guarded: bool) -> SpawnSpec:
    return SpawnSpec.model_validate(
        {"argv": ("/bin/sh", "-c", script), "cwd": str(cwd), "host_death_guard": guarded}
    )


async def _read_all(stream: StdoutUntilExit) -> bytes:
    data = b""
    with anyio.fail_after(10):
        while True:
            try:
                data += await stream.receive()
            except anyio.EndOfStream:
                return data


async def _release_after_grandchild_is_seen(proc: ManagedProcess) -> None:
    """Let the product exit (stdin EOF) once its ``setsid`` grandchild is in the tree.

    Without the guard, the tree only knows descendants seen while the product lived.
    """
    with anyio.fail_after(10):
        while len(proc.tree_pids()) < 2 + proc.guarded:  # noqa: ASYNC110 - process table
            await anyio.sleep(0.01)
    assert proc.stdin is not None
    await proc.stdin.aclose()


async def _finish(proc: ManagedProcess) -> None:
    await proc.terminate()
    await proc.wait_tree_exit()


async def test_ends_at_eof(tmp_path: Path, guarded: bool) -> None:
    proc = await spawn(sh("echo one; echo two", tmp_path, guarded))
    try:
        stream = proc.stdout_until_exit(drain=30)
        assert await _read_all(stream) == b"one\ntwo\n"
        assert stream.ended_by_exit is False
        with pytest.raises(anyio.EndOfStream):
            await stream.receive()
    finally:
        await _finish(proc)


async def test_ends_after_exit_and_drain_while_a_setsid_grandchild_holds_stdout(
    tmp_path: Path, guarded: bool
) -> None:
    # The grandchild inherits stdout in its own session and outlives the product, so EOF
    # never comes; the bytes the product wrote before exiting must still be delivered.
    script = "setsid sleep 60 & printf 'before exit\\n'; read _; exit 3"
    proc = await spawn(sh(script, tmp_path, guarded))
    try:
        await _release_after_grandchild_is_seen(proc)
        stream = proc.stdout_until_exit(drain=0.5)
        started = time.monotonic()
        data = await _read_all(stream)
        elapsed = time.monotonic() - started
        assert data == b"before exit\n"
        assert stream.ended_by_exit is True
        assert proc.exit_facts is not None
        assert proc.exit_facts.exit_code == 3
        assert proc.tree_alive()  # the grandchild really held stdout open
        assert elapsed >= 0.5
        with pytest.raises(anyio.EndOfStream):
            await stream.receive()
    finally:
        await _finish(proc)


async def test_bytes_already_in_the_pipe_at_exit_are_delivered(
    tmp_path: Path, guarded: bool
) -> None:
    # Nobody reads until well after the exit: the window starts when the exit is seen,
    # and everything the product wrote is still delivered within it.
    script = "setsid sleep 60 & read _; i=0; while [ $i -lt 200 ]; do echo line$i; i=$((i+1)); done"
    proc = await spawn(sh(script, tmp_path, guarded))
    try:
        await _release_after_grandchild_is_seen(proc)
        with anyio.fail_after(10):
            await proc.wait()
        stream = proc.stdout_until_exit(drain=0.5)
        data = await _read_all(stream)
        assert data == b"".join(b"line%d\n" % i for i in range(200))
        assert stream.ended_by_exit is True
    finally:
        await _finish(proc)


async def test_closed_stream_refuses_receive(tmp_path: Path, guarded: bool) -> None:
    proc = await spawn(sh("echo x", tmp_path, guarded))
    try:
        stream = proc.stdout_until_exit(drain=0.5)
        await stream.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await stream.receive()
    finally:
        await _finish(proc)
