"""Per-key ready pools: a wrapper that prepares its runs' directories ahead (worktree
isolation's warm pool, ``HoldsReady``) gets one ready product per directory it names
(the kit's ``ready:keyed``, docs/rules.md). The wrapper here names directories by hand;
the real one (dsh-worktree's warm pool) is proven in e2e/test_ready_tier.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_subagent import (
    ReadyPool,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentRun,
    SubagentService,
)
from dsh_subagent.ready import HoldsReady
from subagent_echo import EchoConfig, EchoProvider, request

pytestmark = pytest.mark.anyio


class ReadyEcho(EchoProvider):
    offers_ready_starts: ClassVar[bool] = True


class Prepared(SubagentProvider):
    """Runs ``inner`` as it is; tells the ready pool the directories it says are next."""

    def __init__(self, inner: EchoProvider, holds: bool = True) -> None:
        self._inner = inner
        self._holds = holds
        self.tell: Callable[[list[str]], None] | None = None

    @property
    def inner(self) -> SubagentProvider:
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def capabilities(self) -> SubagentCapabilities:
        return self._inner.capabilities

    @property
    def inherits_parent_context(self) -> bool:
        return self._inner.inherits_parent_context

    def hold_ready(self, pool: ReadyPool, progress_commands: bool) -> bool:
        if self._holds:
            self.tell = lambda cwds: pool.hold([(cwd, progress_commands) for cwd in cwds])
        return self._holds

    async def start(self, request: ResolvedSubagentStartRequest) -> SubagentRun:
        return await self._inner.start(request)


def _dirs(root: Path, *names: str) -> list[str]:
    for name in names:
        (root / name).mkdir()
    return [str(root / name) for name in names]


async def _answer(service: SubagentService, cwd: str) -> str:
    run = await service.start("echo", request("answer", cwd))
    result = await run.result()
    await run.dispose()
    return result.stop_reason


async def test_one_product_per_named_directory_claimed_only_there(tmp_path: Path) -> None:
    first, second, third = _dirs(tmp_path, "a", "b", "c")
    inner = ReadyEcho(EchoConfig(warm=2))
    wrapper = Prepared(inner)
    assert isinstance(wrapper, HoldsReady)
    async with SubagentService() as service:
        service.register_provider(wrapper)
        assert service.keep_ready("echo", str(tmp_path))  # the wrapper names the cwds
        pool = service.ready_pool("echo")
        assert pool is not None
        assert pool.per_key
        assert wrapper.tell is not None
        wrapper.tell([first, second, third])  # at most warm = 2: the first two
        assert await pool.wait_ready()
        assert sorted(child.cwd for child in pool.idle) == [first, second]
        (in_first,) = [child for child in pool.idle if child.cwd == first]
        assert await _answer(service, first) == "completed"
        assert not in_first.process.tree_alive()  # it served that delegation
        assert await _answer(service, third) == "completed"  # nothing there: cold
        assert (pool.stats.claimed, pool.stats.cold) == (1, 1)
        assert [child.cwd for child in pool.idle] == [second]  # no refill for a claimed key
        (in_second,) = pool.idle
        wrapper.tell([third])  # the second directory is gone: its product ends
        await in_second.process.wait_tree_exit()
        assert await pool.wait_ready()
        assert [child.cwd for child in pool.idle] == [third]
        (in_third,) = pool.idle
    assert not in_third.process.tree_alive()  # closing leaves nothing
    assert len(inner.spawned) == 4  # first, second, the cold one, third


async def test_a_wrapper_preparing_no_directory_keeps_nothing_ready(tmp_path: Path) -> None:
    inner = ReadyEcho(EchoConfig(warm=1))
    async with SubagentService() as service:
        service.register_provider(Prepared(inner, holds=False))
        assert not service.keep_ready("echo", str(tmp_path))
        assert await _answer(service, str(tmp_path)) == "completed"
        assert service.ready_pool("echo") is None
    assert len(inner.spawned) == 1
