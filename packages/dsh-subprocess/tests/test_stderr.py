"""stderr: always drained, forwarded line by line, never able to block the child."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import anyio
import pytest
from dsh_subprocess import ExitFacts, SpawnSpec, spawn

pytestmark = pytest.mark.anyio


def _python(code: str, cwd: Path, **fields: object) -> SpawnSpec:
    return SpawnSpec.model_validate(
        {"argv": (sys.executable, "-c", code), "cwd": str(cwd), **fields}
    )


class _Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            self.threads.add(threading.current_thread().name)


async def test_a_flood_of_stderr_never_blocks_the_child(tmp_path: Path, guarded: bool) -> None:
    # 12 MiB on stderr while the host reads nothing; a blocked child would never exit.
    code = (
        "import sys\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for _ in range(12 * 1024): sys.stderr.write(line)\n"
        "sys.stderr.flush()\n"
    )
    recorder = _Recorder()
    proc = await spawn(
        _python(code, tmp_path, stdout="devnull", host_death_guard=guarded),
        stderr_observer=recorder,
    )
    with anyio.fail_after(30):
        facts = await proc.wait()
    await proc.terminate()
    assert facts == ExitFacts(exit_code=0, signal=None)
    assert len(recorder.lines) == 12 * 1024
    assert set(recorder.lines) == {"x" * 1023}
    assert threading.current_thread().name not in recorder.threads


async def test_lines_are_decoded_split_and_the_last_partial_line_is_kept(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "os.write(2, b'one\\ntw')\n"
        "os.write(2, b'o\\n\\xff bad\\n\\xc3')\n"  # a two-byte character split across writes
        "os.write(2, b'\\xa9 split\\n\\nlast without newline')\n"
    )
    recorder = _Recorder()
    async with await spawn(_python(code, tmp_path), stderr_observer=recorder) as proc:
        await proc.wait()
    assert recorder.lines == ["one", "two", "\ufffd bad", "é split", "", "last without newline"]


async def test_a_failing_observer_does_not_stop_the_drain(tmp_path: Path) -> None:
    seen: list[str] = []

    def observer(line: str) -> None:
        seen.append(line)
        raise RuntimeError("observer bug")

    code = "import sys\nfor i in range(3000): print(i, file=sys.stderr)\n"
    async with await spawn(_python(code, tmp_path), stderr_observer=observer) as proc:
        with anyio.fail_after(30):
            assert (await proc.wait()).exit_code == 0
    assert seen == [str(i) for i in range(3000)]


_LINES = ["first", "second  ", "100% done %s %(x)s %d", "\tindented", "", "last"]


async def test_default_observer_logs_each_line_unchanged_and_nothing_reaches_fd_2(
    tmp_path: Path,
    guarded: bool,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO, logger="dsh_subprocess.stderr")
    code = f"import sys; sys.stderr.write({chr(10).join(_LINES) + chr(10)!r})"
    async with await spawn(_python(code, tmp_path, host_death_guard=guarded)) as proc:
        assert (await proc.wait()).exit_code == 0
    records = [r for r in caplog.records if r.name == "dsh_subprocess.stderr"]
    # The line is the message itself: no arguments, so "%" is never interpreted.
    assert [r.msg for r in records] == _LINES
    assert [r.getMessage() for r in records] == _LINES
    assert all(r.args == () for r in records)
    assert {r.levelno for r in records} == {logging.INFO}
    assert capfd.readouterr().err == ""


# A host with logging left unconfigured: product stderr must not reach its fd 2 either
# (logging's last-resort handler prints WARNING and above only).
_QUIET_HOST = """
import sys
import anyio
from dsh_subprocess import SpawnSpec, spawn

async def main() -> None:
    code = "import sys; print('product noise', file=sys.stderr)"
    spec = SpawnSpec(argv=(sys.executable, "-c", code), cwd=sys.argv[1], host_death_guard=False)
    async with await spawn(spec) as proc:
        assert (await proc.wait()).exit_code == 0
    print("done", flush=True)

anyio.run(main)
"""


async def test_a_host_without_logging_configured_prints_no_product_stderr(
    tmp_path: Path,
) -> None:
    host_stderr = _Recorder()
    spec = _python(_QUIET_HOST, tmp_path, stdin="devnull", host_death_guard=False)
    spec = spec.model_copy(update={"argv": (*spec.argv, str(tmp_path))})
    async with await spawn(spec, stderr_observer=host_stderr) as host:
        assert host.stdout is not None
        out = b""
        async for chunk in host.stdout:
            out += chunk
        assert await host.wait() == ExitFacts(exit_code=0, signal=None), host_stderr.lines
    assert out == b"done\n"
    assert host_stderr.lines == []


async def test_stdout_is_a_protocol_stream_and_stdin_is_writable(tmp_path: Path) -> None:
    code = "import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)\n"
    async with await spawn(_python(code, tmp_path)) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        await proc.stdin.send(b"hello\n")
        received = b""
        with anyio.fail_after(10):
            while not received.endswith(b"\n"):
                received += await proc.stdout.receive()
        assert received == b"HELLO\n"
        await proc.stdin.aclose()
        assert (await proc.wait()).exit_code == 0


@pytest.mark.parametrize("mode", ["devnull", "inherit"])
async def test_other_stderr_dispositions(
    tmp_path: Path, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = "import sys; sys.stderr.write('to-stderr\\n')"
    spec = _python(code, tmp_path, stderr=mode, stdin="devnull", stdout="devnull")
    async with await spawn(spec) as proc:
        assert proc.stdin is None
        assert proc.stdout is None
        assert (await proc.wait()).exit_code == 0
    assert ("to-stderr" in capfd.readouterr().err) is (mode == "inherit")
