"""A request the app-server never answers ends, bounded by ``response_timeout_seconds``.

The real app-server logs a request it cannot parse (a lone surrogate, for one) and never
answers it. Each request that expects a direct response (``initialize``,
``thread/start``, ``turn/start``) is therefore bounded: the start fails, or the run
settles, with category ``response-timeout``, and the whole tree is gone. The turn itself
is not bounded by it. The fake app-server here reads the request and then hangs.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import psutil
import pytest
from codex_harness import FakeCodex, Step, answered, handshake, make_request
from dsh_subagent import ProductChild, ProductStartError

pytestmark = pytest.mark.anyio

BOUND = 0.5


@pytest.fixture
def bound_at(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Apply the short bound only to the request of one stage.

    Every request's bound starts when it is sent, and the bound of ``initialize`` also
    covers the interpreter's startup, which takes seconds on a loaded machine: the other
    requests get a long bound so that only the stage under test can run out.
    """

    def at(stage: str) -> None:
        def deadline(self: ProductChild) -> float:
            return anyio.current_time() + (BOUND if self.stage == stage else 600.0)

        monkeypatch.setattr(ProductChild, "response_deadline", deadline)

    return at


LINE = "Product subagent failure (product: Codex; stage: {stage}; category: response-timeout)"


def _root_gone(fake: FakeCodex) -> bool:
    """Whether the fake app-server (the run's root process) has exited."""
    started = [r for r in fake.records() if r.get("event") == "started"]
    if not started:
        return True  # ended before it ran a line of its own
    try:
        return psutil.Process(int(started[0]["pid"])).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("steps", "stage"),
    [
        ([{"op": "expect", "method": "initialize"}, {"op": "hang"}], "initialize"),
        ([*handshake()[:4], {"op": "hang"}], "thread-start"),
    ],
    ids=["initialize", "thread-start"],
)
async def test_an_unanswered_startup_request_fails_the_start(
    fake: FakeCodex, bound_at: Callable[[str], None], steps: list[Step], stage: str
) -> None:
    bound_at(stage)
    provider = fake.provider(steps)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ProductStartError) as caught:
                await provider.start(make_request(tg, str(fake.workspace)))
    assert caught.value.message == "subagent-codex: " + LINE.format(stage=stage)
    assert _root_gone(fake)  # rolled back to whole-tree exit


async def test_an_unanswered_turn_start_settles_the_run_with_the_tree_gone(
    fake: FakeCodex, bound_at: Callable[[str], None]
) -> None:
    bound_at("turn-start")
    steps = [*handshake(), {"op": "expect", "method": "turn/start"}, {"op": "hang"}]
    provider = fake.provider(steps)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, str(fake.workspace)))
            try:
                result = await run.result()
                gone_at_settlement = _root_gone(fake)
            finally:
                await run.dispose()
    assert result.stop_reason == "error"
    assert result.diagnostic == LINE.format(stage="turn-start")
    assert gone_at_settlement


async def test_the_turn_itself_is_not_bounded_by_it(
    fake: FakeCodex, bound_at: Callable[[str], None]
) -> None:
    # The turn/start response comes at once; the answer only after more than the bound.
    bound_at("turn-start")
    steps = answered({"op": "sleep", "seconds": 3 * BOUND})
    provider = fake.provider(steps)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            run = await provider.start(make_request(tg, str(fake.workspace)))
            try:
                result = await run.result()
            finally:
                await run.dispose()
    assert (result.stop_reason, result.text) == ("completed", "the answer")


async def test_the_configured_bound_reaches_the_run(fake: FakeCodex) -> None:
    # Nothing answers initialize: the configured bound (not the default) ends the start.
    provider = fake.provider([{"op": "hang"}], response_timeout_seconds=BOUND)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ProductStartError) as caught:
                await provider.start(make_request(tg, str(fake.workspace)))
    assert caught.value.message == "subagent-codex: " + LINE.format(stage="initialize")
