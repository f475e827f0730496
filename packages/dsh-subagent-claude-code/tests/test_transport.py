"""The managed transport's stdout stream: where it ends, how long a line may be, and what
it leaves behind."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import ProcessError
from claude_agent_sdk._internal.transport import subprocess_cli
from claude_harness import GRACE, Standin, run_once, started, wait_for
from dsh_subagent import COMPLETED, ERROR, ProductChild, TextBlock
from dsh_subagent_claude_code import ClaudeCodeProvider
from dsh_subagent_claude_code.provider import MAX_FRAME_BYTES
from dsh_subagent_claude_code.transport import ManagedCLITransport
from dsh_subprocess import SpawnSpec, spawn

pytestmark = pytest.mark.anyio

LINE = "Product subagent failure (product: Claude Code; stage: {stage}; category: {category}"

# A stand-in for a CLI whose tool process runs in its own session and inherits stdout:
# it writes its frames, leaves a setsid'd ``sleep`` holding stdout, and exits.
_HELD_STDOUT_CLI = """
import json, os, sys
frames, code, pidfile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "300"])
open(pidfile, "w").write(str(pid))
for n in range(frames):
    print(json.dumps({"type": "frame", "n": n, "pad": "x" * 200}))
sys.stdout.flush()
os._exit(code)
"""


async def _child(tmp_path: Path, argv: tuple[str, ...], grace: float) -> ProductChild:
    spec = SpawnSpec(argv=argv, cwd=str(tmp_path), stdout="pipe", stdin="pipe", grace=1.0)
    return ProductChild(
        product="Claude Code",
        process=await spawn(spec),
        cwd=str(tmp_path),
        run_id="run",
        task_texts=("task",),
        stage="query-run",
        grace=grace,
        exit_drain=grace,
        max_line_bytes=MAX_FRAME_BYTES,
        malformed="fail",
    )


async def _read_all(transport: ManagedCLITransport) -> list[dict[str, Any]]:
    return [frame async for frame in transport.read_messages()]


async def _read_into(got: list[dict[str, Any]], transport: ManagedCLITransport) -> None:
    async for frame in transport.read_messages():
        got.append(frame)


def _alive(process: psutil.Process) -> bool:
    return process.is_running() and process.status() != psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("code", [0, 3])
async def test_stream_ends_after_the_exit_while_a_session_child_holds_stdout(
    tmp_path: Path, code: int
) -> None:
    pidfile = tmp_path / "held.pid"
    frames = 2000  # more than a pipe holds: the writer blocks until the reader drains it
    argv = (sys.executable, "-c", _HELD_STDOUT_CLI, str(frames), str(code), str(pidfile))
    child = await _child(tmp_path, argv, grace=0.2)
    transport = ManagedCLITransport(child)
    await transport.connect()
    try:
        got: list[dict[str, Any]] = []
        with anyio.fail_after(10):
            if code == 0:
                got = await _read_all(transport)
            else:
                with pytest.raises(ProcessError) as caught:
                    await _read_into(got, transport)
                assert caught.value.exit_code == code
        # Every frame written before the exit arrived, in order; stdout is still held.
        assert [frame["n"] for frame in got] == list(range(frames))
        held = psutil.Process(int(pidfile.read_text()))
        assert _alive(held)
        assert os.getsid(held.pid) == held.pid
    finally:
        with anyio.fail_after(10):
            await child.process.terminate()
    assert not _alive(held)


async def test_an_abandoned_stream_leaves_nothing_to_finalize(tmp_path: Path) -> None:
    # The SDK's reader may stop iterating between two frames (a close racing a frame) and
    # never close the iterator; on trio an abandoned async generator warns at GC.
    script = "import json\nfor n in range(3): print(json.dumps({'n': n}), flush=True)\ninput()"
    child = await _child(tmp_path, (sys.executable, "-c", script), grace=GRACE)
    transport = ManagedCLITransport(child)
    await transport.connect()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stream = transport.read_messages()
            with anyio.fail_after(10):
                first = await stream.__anext__()
            assert first == {"n": 0}
            del stream
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    finally:
        with anyio.fail_after(10):
            await child.process.terminate()


async def test_a_clean_eof_still_waits_for_the_exit_code(tmp_path: Path) -> None:
    # Closing stdout is not exiting: the failure of a CLI that closes it first still counts.
    script = "import os, time\nos.close(1)\ntime.sleep(0.3)\nos._exit(5)"
    child = await _child(tmp_path, (sys.executable, "-c", script), grace=GRACE)
    transport = ManagedCLITransport(child)
    await transport.connect()
    try:
        with anyio.fail_after(10), pytest.raises(ProcessError) as caught:
            await _read_all(transport)
        assert caught.value.exit_code == 5
    finally:
        await child.process.terminate()


# -- through the provider: the run settles without waiting for disposal ------------------


def _session_child(standin: Standin) -> dict[str, Any]:
    return {"op": "spawn_session_child", "pidfile": str(standin.path("tool.pid"))}


async def _settle_before_dispose(standin: Standin, steps: list[dict[str, Any]]) -> Any:
    async with started(standin.provider(steps), standin.workspace) as run:
        # Bounded well below any dispose: the CLI exit plus the drain grace ends the stream.
        with anyio.fail_after(GRACE + 8):
            result = await run.result()
        tool = psutil.Process(int(standin.path("tool.pid").read_text()))
        assert _alive(tool)
    await wait_for(lambda: not _alive(tool))
    return result


async def test_success_settles_while_a_tool_process_holds_stdout(standin: Standin) -> None:
    result = await _settle_before_dispose(
        standin,
        [
            {"op": "init"},
            _session_child(standin),
            {"op": "assistant", "text": "working"},
            {"op": "result", "result": "the answer"},
        ],
    )
    assert result.stop_reason == COMPLETED
    assert result.output == (TextBlock(text="the answer"),)


async def test_crash_while_a_tool_process_holds_stdout_is_process_exit(standin: Standin) -> None:
    result = await _settle_before_dispose(
        standin, [{"op": "init"}, _session_child(standin), {"op": "exit", "code": 3}]
    )
    assert result.stop_reason == ERROR
    assert result.diagnostic == (
        LINE.format(stage="process", category="process-exit") + "; exit code: 3)"
    )


async def test_clean_exit_without_result_while_stdout_is_held_is_missing_result(
    standin: Standin,
) -> None:
    result = await _settle_before_dispose(
        standin, [{"op": "init"}, _session_child(standin), {"op": "exit", "code": 0}]
    )
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="missing-result") + ")"


# -- the frame bound: the SDK's own, through the runtime's bounded line reader -------------


def test_the_frame_bound_is_the_sdks_default_message_bound() -> None:
    assert ClaudeCodeProvider.max_line_bytes == subprocess_cli._DEFAULT_MAX_BUFFER_SIZE


@pytest.mark.parametrize("size", [MAX_FRAME_BYTES, MAX_FRAME_BYTES + 1])
async def test_a_frame_up_to_the_bound_is_read_and_a_longer_one_fails(
    standin: Standin, size: int
) -> None:
    provider = standin.provider(
        [{"op": "init"}, {"op": "pad_frame", "bytes": size}, {"op": "result", "result": "ok"}]
    )
    result = await run_once(provider, standin.workspace)
    if size <= MAX_FRAME_BYTES:
        assert result.stop_reason == COMPLETED
        assert result.text == "ok"
    else:
        assert result.stop_reason == ERROR
        assert result.diagnostic is not None
        assert result.diagnostic.startswith(
            LINE.format(stage="query-run", category="line-too-long")
        )


async def test_a_256_mib_line_without_newline_is_bounded(standin: Standin) -> None:
    # The CLI writes 256 MiB with no newline and never ends the line: the reader keeps at
    # most one frame bound plus a chunk, the run fails with a fixed line, and disposal
    # leaves nothing behind.
    size = 256 << 20
    spawned: list[Any] = []

    async def spawner(spec: SpawnSpec, **kwargs: Any) -> Any:
        spawned.append(await spawn(spec, **kwargs))
        return spawned[-1]

    provider = standin.provider(
        [{"op": "init"}, {"op": "pad_frame", "bytes": size, "newline": False}], spawner=spawner
    )
    me = psutil.Process()
    before = me.memory_info().rss
    async with started(provider, standin.workspace) as run:
        with anyio.fail_after(60):
            result = await run.result()
        grown = me.memory_info().rss - before
    assert result.stop_reason == ERROR
    assert result.diagnostic == LINE.format(stage="query-run", category="line-too-long") + ")"
    assert grown < 64 << 20, f"RSS grew by {grown >> 20} MiB"
    [process] = spawned
    assert not process.tree_alive()
