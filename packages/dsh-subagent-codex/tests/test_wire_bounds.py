"""The app-server's stdout goes through one bounded line reader (fake app-server).

A product is not trusted to end its lines: a line longer than the provider's bound fails
the run with a fixed diagnostic instead of growing the host's memory, and the tree goes.
"""

from __future__ import annotations

import threading
from types import TracebackType

import psutil
import pytest
from codex_harness import FakeCodex, agent_message, delegate, handshake, terminal, turn_start
from dsh_subagent_codex.provider import MAX_FRAME_BYTES, CodexProvider

pytestmark = pytest.mark.anyio

MIB = 1 << 20


class PeakRss:
    """Samples this process's RSS from a thread; ``growth`` is the peak over the start."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._start = self._peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self._process.memory_info().rss)
            self._stop.wait(0.002)

    @property
    def growth(self) -> int:
        return self._peak - self._start

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


def test_the_bound_is_the_providers_explicit_choice() -> None:
    assert CodexProvider.max_line_bytes == MAX_FRAME_BYTES == 32 * MIB
    # The app-server logs to stderr; a stray stdout line that is not JSON is skipped.
    assert CodexProvider.malformed_lines == "skip"


async def test_a_256_mib_line_without_newline_fails_the_run_with_bounded_memory(
    fake: FakeCodex,
) -> None:
    steps = [
        *handshake(),
        *turn_start(),
        agent_message("partial", None),
        {"op": "write_long", "bytes": 256 * MIB},
    ]
    with PeakRss() as rss:
        result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert result.stop_reason == "error"
    assert result.text == "partial"
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: line-too-long)"
    )
    assert rss.growth < 64 * MIB, f"host RSS grew {rss.growth / MIB:.1f} MiB"
    # The root conftest fails the test if the fake (blocked in its write) is still alive.


async def test_a_long_frame_below_the_bound_is_read(fake: FakeCodex) -> None:
    text = "y" * (3 * MIB)
    steps = [*handshake(), *turn_start(), agent_message(text, "final_answer"), terminal()]
    result, _ = await delegate(fake.provider(steps), fake.workspace)
    assert (result.stop_reason, result.text) == ("completed", text)
