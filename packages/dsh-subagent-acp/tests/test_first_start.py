"""An instance's first agent start runs alone (OpenCode's first-start database race)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from acp_harness import Scripted, delegate
from dsh_subagent_acp.first_start import FirstStartAlone


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the provider's acp library is asyncio-only


pytestmark = pytest.mark.anyio


async def _hold(gate: FirstStartAlone, name: str, seen: list[str], leave: anyio.Event) -> None:
    async with gate.passage():
        seen.append(name)
        await leave.wait()
    seen.append(f"{name} left")


async def test_a_second_first_start_waits_until_the_first_one_opened() -> None:
    gate, seen = FirstStartAlone(), list[str]()
    first_leaves, second_leaves = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold, gate, "first", seen, first_leaves)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(_hold, gate, "second", seen, second_leaves)
        await anyio.wait_all_tasks_blocked()
        assert seen == ["first"]  # the second start has not spawned
        gate.open_succeeded()
        first_leaves.set()
        await anyio.wait_all_tasks_blocked()
        assert seen == ["first", "first left", "second"]
        second_leaves.set()


async def test_a_failed_first_start_hands_the_gate_to_the_next_alone() -> None:
    gate, seen = FirstStartAlone(), list[str]()
    leaves = [anyio.Event() for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(_hold, gate, str(index), seen, leaves[index])
            await anyio.wait_all_tasks_blocked()
        assert seen == ["0"]
        leaves[0].set()  # failed: never opened
        await anyio.wait_all_tasks_blocked()
        assert seen == ["0", "0 left", "1"]  # the third still waits: none opened yet
        gate.open_succeeded()
        leaves[1].set()
        await anyio.wait_all_tasks_blocked()
        assert seen == ["0", "0 left", "1", "1 left", "2"]
        leaves[2].set()


async def test_once_one_start_opened_starts_run_concurrently() -> None:
    gate, seen = FirstStartAlone(), list[str]()
    gate.open_succeeded()
    leave = anyio.Event()
    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(_hold, gate, str(index), seen, leave)
        await anyio.wait_all_tasks_blocked()
        assert sorted(seen) == ["0", "1", "2"]
        leave.set()


async def test_the_provider_holds_its_first_starts_apart_until_one_opened(
    tmp_path: Path,
) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "done"}]})
    provider, other = agent.provider(), agent.provider()
    cwd = str(agent.workspace)
    gate = provider.admission(cwd)
    second_in = anyio.Event()

    async def second() -> None:
        async with provider.admission(cwd):
            second_in.set()

    async with gate, anyio.create_task_group() as tg:
        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        assert not second_in.is_set()
        async with other.admission(cwd):  # another instance has a gate of its own
            pass
        tg.cancel_scope.cancel()
    result = await delegate(provider, cwd=cwd)  # a real start opens: the gate opens for good
    assert (result.stop_reason, result.text) == ("completed", "done")
    async with provider.admission(cwd), provider.admission(cwd):
        pass
