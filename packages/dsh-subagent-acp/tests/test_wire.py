"""The agent's wire through the runtime: one bounded stdout reader, stderr logged."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from pathlib import Path
from typing import cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import psutil
import pytest
from acp.client.connection import ClientSideConnection
from acp.interfaces import Client
from acp_harness import Scripted, delegate, make_request, pid_alive, started_run
from dsh_subagent import ProductChild, ProductStartError
from dsh_subagent_acp.transport import MAX_FRAME_BYTES, LineTransport


# The acp library's connection is asyncio-only (see test_backend.py for trio).
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio

MIB = 1 << 20
LINE = "Product subagent failure (product: ACP; stage: {stage}; category: {category})"


class _PeakRss:
    """This process's peak RSS growth, sampled in a thread while the block runs."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.baseline = 0
        self.peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def __enter__(self) -> _PeakRss:
        gc.collect()
        self.baseline = self.peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_a_256_mib_line_is_bounded_and_fails_the_run(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "partial "}, {"long_line": 256 * MIB}]})
    with _PeakRss() as rss:
        result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "error"
    assert result.text == "partial "
    assert result.diagnostic == LINE.format(stage="prompt", category="line-too-long")
    assert not pid_alive(agent.started()["pid"])
    assert rss.growth < 64 * MIB, f"host RSS grew by {rss.growth / MIB:.1f} MiB"


@pytest.mark.parametrize(
    ("key", "stage"), [("initialize", "initialize"), ("session_new", "session-new")]
)
async def test_an_overlong_line_at_startup_fails_the_start(
    tmp_path: Path, key: str, stage: str
) -> None:
    agent = Scripted(tmp_path, {key: {"do": "long_line", "bytes": MAX_FRAME_BYTES + MIB}})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ProductStartError) as caught:
                await agent.provider().start(make_request(tg, cwd=str(agent.workspace)))
    assert caught.value.message == "subagent-acp: " + LINE.format(
        stage=stage, category="line-too-long"
    )
    assert not pid_alive(agent.started()["pid"])


async def test_a_frame_above_the_runtime_default_is_accepted(tmp_path: Path) -> None:
    # The ACP bound is deliberately above the runtime's 8 MiB default: frames may embed
    # resources and images as base64.
    big = "y" * (12 * MIB)
    agent = Scripted(tmp_path, {"prompt": [{"chunk": big}]})
    result = await delegate(agent.provider(), cwd=str(agent.workspace))
    assert result.stop_reason == "completed"
    assert result.text == big


async def test_agent_stderr_is_logged_per_line_never_inherited(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = "agent-stderr-marker-7f3a"
    seen = threading.Event()
    records: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            if record.getMessage() == marker:
                seen.set()

    logger = logging.getLogger("dsh.product.acp")
    handler = Catch()
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        agent = Scripted(tmp_path, {"prompt": [{"stderr": marker}, {"chunk": "ok"}]})
        provider = agent.provider(provider_name="acp-logged")
        with anyio.fail_after(30):
            async with started_run(provider, cwd=str(agent.workspace)) as run:
                assert (await run.result()).text == "ok"
                assert await anyio.to_thread.run_sync(seen.wait, 20)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    (record,) = [r for r in records if r.getMessage() == marker]
    assert (record.provider, record.run_id) == ("acp-logged", run.id)  # type: ignore[attr-defined]
    assert marker not in capfd.readouterr().err


class _FrameAfterCancel:
    """A reader whose cancellation is absorbed and which then yields one notification.

    It stands in for a read that completed in the same instant the library cancelled it
    (an anyio task group racing its own cancel can absorb the native cancellation).
    """

    def __init__(self) -> None:
        self.reads = 0
        self.reading = anyio.Event()

    async def receive_json(self) -> object:
        self.reads += 1
        self.reading.set()
        if self.reads == 1:
            # Absorbed: the read "completed" anyway.
            with contextlib.suppress(anyio.get_cancelled_exc_class()):
                await anyio.sleep_forever()
            return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


class _Child:
    def __init__(self) -> None:
        self.lines = _FrameAfterCancel()


async def test_no_frame_reaches_the_library_once_it_closed_the_transport() -> None:
    """Delivering it would make the closed connection drop a never-awaited handler
    coroutine (a RuntimeWarning at garbage collection, and a lost notification)."""
    child = _Child()
    transport = LineTransport(cast(ProductChild, child))
    conn = ClientSideConnection(cast(Client, object()), transport)
    await child.lines.reading.wait()  # the library's receive loop is reading
    # Before the fix: RuntimeError "TaskSupervisor for acp.Connection already closed"
    # here, and the dropped coroutine reported (unraisable) at the collection below.
    await conn.close()
    gc.collect()
    assert child.lines.reads == 1
    assert not transport.ended.is_set()  # closing is not the agent's stdout ending
