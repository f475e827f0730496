"""Ready products (``warm``) on the runtime, against a real child process.

The rules under test are the kit's ``ready:*`` ids (docs/rules.md). The root conftest
fails any test that leaves a process behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import psutil
import pytest
from dsh_subagent import (
    COMPLETED,
    CancelController,
    ProductChild,
    StartCancelledError,
    SubagentService,
)
from dsh_subagent.ready import ReadyPool
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver
from pydantic import ValidationError
from subagent_echo import EchoConfig, EchoProvider, request

pytestmark = pytest.mark.anyio


class ReadyEcho(EchoProvider):
    offers_ready_starts: ClassVar[bool] = True


class FirstOpenFails(ReadyEcho):
    """Its first handshake fails (a ready product whose preparation failed)."""

    opened = 0

    async def open(self, child: ProductChild) -> None:
        self.opened += 1
        if self.opened == 1:
            raise child.fail("handshake")
        await super().open(child)


@pytest.fixture
async def service() -> AsyncIterator[SubagentService]:
    async with SubagentService() as subagents:
        yield subagents


def _pool(service: SubagentService, name: str = "echo") -> ReadyPool:
    pool = service.ready_pool(name)
    assert pool is not None
    return pool


async def _ready(service: SubagentService, cwd: Path, name: str = "echo") -> ReadyPool:
    assert service.keep_ready(name, str(cwd))
    pool = _pool(service, name)
    assert await pool.wait_ready()
    return pool


async def _answer(service: SubagentService, task: str, cwd: Path) -> tuple[str, str, int]:
    run = await service.start("echo", request(task, str(cwd)))
    result = await run.result()
    await run.dispose()
    assert result.diagnostic is None
    return result.stop_reason, result.text, len(result.output)


async def test_a_ready_product_serves_one_delegation_like_a_cold_one(
    service: SubagentService, tmp_path: Path
) -> None:
    cold = EchoProvider(EchoConfig(provider_name="cold"))
    provider = ReadyEcho(EchoConfig(warm=1))
    service.register_provider(cold)
    service.register_provider(provider)
    pool = await _ready(service, tmp_path)
    ready_pid = pool.idle[0].process.pid
    run = await service.start("cold", request("answer same", str(tmp_path)))
    cold_result = await run.result()
    await run.dispose()
    warm = await _answer(service, "answer same", tmp_path)
    assert warm == (cold_result.stop_reason, cold_result.text, len(cold_result.output))
    assert warm[:2] == (COMPLETED, "same")
    assert pool.stats.claimed == 1
    # ready:one-delegation-per-product: the claimed tree ended with its run; the
    # replacement is another process, and the next delegation runs on it.
    assert not psutil.pid_exists(ready_pid) or psutil.Process(ready_pid).status() == "zombie"
    assert await pool.wait_ready()
    second_pid = pool.idle[0].process.pid
    assert second_pid != ready_pid
    await _answer(service, "answer again", tmp_path)
    assert await pool.wait_ready()
    pids = [process.pid for process in provider.spawned]
    assert len(pids) == len(set(pids)) == 3, pids  # two served, one ready; none reused
    assert pool.stats.claimed == 2


async def test_warm_zero_keeps_nothing_ready(service: SubagentService, tmp_path: Path) -> None:
    provider = ReadyEcho(EchoConfig())
    service.register_provider(provider)
    assert not service.keep_ready("echo", str(tmp_path))
    await _answer(service, "answer cold", tmp_path)
    assert service.ready_pool("echo") is None
    assert len(provider.spawned) == 1


async def test_a_provider_that_offers_no_ready_starts_ignores_warm(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = EchoProvider(EchoConfig(warm=2))
    service.register_provider(provider)
    assert not service.keep_ready("echo", str(tmp_path))
    await _answer(service, "answer cold", tmp_path)
    assert len(provider.spawned) == 1


async def test_a_ready_product_killed_while_idle_falls_back_to_a_cold_start(
    service: SubagentService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = ReadyEcho(EchoConfig(warm=1))
    service.register_provider(provider)
    pool = await _ready(service, tmp_path)
    victim = pool.idle[0].process
    os.kill(victim.pid, signal.SIGKILL)
    await victim.wait()
    assert await _answer(service, "answer still", tmp_path) == (COMPLETED, "still", 1)
    assert (pool.stats.fallbacks, pool.stats.cold, pool.stats.claimed) == (1, 1, 0)
    assert "died while idle" in caplog.text


async def test_a_failed_preparation_never_fails_a_delegation(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = FirstOpenFails(EchoConfig(warm=1))
    service.register_provider(provider)
    service.keep_ready("echo", str(tmp_path))
    assert not await _pool(service).wait_ready()
    assert await _answer(service, "answer fine", tmp_path) == (COMPLETED, "fine", 1)
    pool = _pool(service)
    assert (pool.stats.failed, pool.stats.cold) == (1, 1)
    assert not provider.spawned[0].tree_alive()  # the failed preparation's tree ended


async def test_a_delegation_in_another_cwd_starts_cold_and_the_pool_follows_it(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ReadyEcho(EchoConfig(warm=1))
    service.register_provider(provider)
    pool = await _ready(service, tmp_path)
    prepared_for_first = pool.idle[0].process
    other = tmp_path / "other"
    other.mkdir()
    await _answer(service, "answer elsewhere", other)
    assert (pool.stats.cold, pool.stats.claimed) == (1, 0)
    await prepared_for_first.wait_tree_exit()  # released: never claimed for another cwd
    assert await pool.wait_ready()
    assert pool.idle[0].cwd == str(other)


async def test_a_request_aborted_before_start_leaves_the_ready_product_ready(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = ReadyEcho(EchoConfig(warm=1))
    service.register_provider(provider)
    pool = await _ready(service, tmp_path)
    ready = pool.idle[0].process
    cancel = CancelController()
    parent = request("answer no", str(tmp_path), cancel)
    cancel.cancel("changed my mind")
    with pytest.raises(StartCancelledError):
        await service.start("echo", parent)
    assert (pool.stats.claimed, pool.idle[0].process) == (0, ready)
    assert ready.tree_alive()


async def test_closing_the_service_leaves_no_ready_product(tmp_path: Path) -> None:
    provider = ReadyEcho(EchoConfig(warm=3))
    async with SubagentService() as service:
        service.register_provider(provider)
        await _ready(service, tmp_path)
        assert len(provider.spawned) == 3
    for process in provider.spawned:
        assert not process.tree_alive()


async def test_closing_during_a_preparation_ends_the_half_prepared_tree(tmp_path: Path) -> None:
    provider = ReadyEcho(EchoConfig(warm=1, child_mode="silent-open"))
    async with SubagentService() as service:
        service.register_provider(provider)
        service.keep_ready("echo", str(tmp_path))
        await provider.opening.wait()  # spawned, its handshake never answered
    assert provider.spawned
    assert not provider.spawned[0].tree_alive()


@pytest.mark.parametrize("value", [-1, 65, True, "2"])
def test_warm_is_a_small_non_negative_integer(value: object) -> None:
    with pytest.raises(ValidationError, match="warm"):
        EchoConfig.model_validate({"warm": value})


async def test_a_ready_product_is_spawned_exactly_as_a_cold_start(tmp_path: Path) -> None:
    """Same argv, cwd, overlay, confinement policy and host-death guard; only the run's
    private temporary directory differs (each tree has its own)."""
    specs: dict[str, SpawnSpec] = {}

    class Recording(ReadyEcho):
        async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
            specs.setdefault(self.name, spec)
            return await super().spawn(spec, stderr_observer)

    async with SubagentService() as service:
        ready = Recording(EchoConfig(warm=1, env={"B": "config"}))
        cold = Recording(EchoConfig(provider_name="cold", env={"B": "config"}))
        service.register_provider(ready)
        service.register_provider(cold)
        await _ready(service, tmp_path)
        run = await service.start("cold", request("answer x", str(tmp_path)))
        await run.result()
        await run.dispose()
        assert ready.spawned[0].guarded
        assert cold.spawned[0].guarded

    def shape(spec: SpawnSpec) -> str:
        private = str(spec.env["TMPDIR"])
        assert Path(private).name.startswith("dsh-run-")
        return spec.model_dump_json().replace(private, "<private tmp>")

    assert shape(specs["echo"]) == shape(specs["cold"])
    assert specs["echo"].env["B"] == "config"


class AheadEcho(ReadyEcho):
    """Records ``open_ahead`` (it leaves state for ``run()``) and ``release_state``."""

    def __init__(self, config: EchoConfig, *, fail_ahead: bool = False) -> None:
        super().__init__(config)
        self.fail_ahead = fail_ahead
        self.ahead: list[int] = []
        self.released: list[tuple[int, object]] = []
        self.ran_with: list[tuple[int, object]] = []
        self.gone: list[int] = []

    async def open_ahead(self, child: ProductChild) -> None:
        self.ahead.append(child.process.pid)
        if self.fail_ahead:
            raise child.fail("handshake")
        child.state = f"connected {child.process.pid}"

    async def release_state(self, child: ProductChild) -> None:
        self.released.append((child.process.pid, child.state))
        if not child.process.tree_alive():  # the teardown's call, once the tree is gone
            self.gone.append(child.process.pid)

    async def run(self, child: ProductChild) -> str:
        self.ran_with.append((child.process.pid, child.state))
        return await super().run(child)


async def test_open_ahead_runs_only_for_ready_products_and_release_state_on_every_path(
    tmp_path: Path,
) -> None:
    provider = AheadEcho(EchoConfig(warm=1))
    async with SubagentService() as service:
        service.register_provider(provider)
        pool = await _ready(service, tmp_path)
        claimed = pool.idle[0].process.pid
        assert provider.ahead == [claimed]  # ahead of any task
        await _answer(service, "answer ready", tmp_path)
        # The claimed run continued from what open_ahead left; its state was released.
        assert provider.ran_with == [(claimed, f"connected {claimed}")]
        assert (claimed, f"connected {claimed}") in provider.released
        assert await pool.wait_ready()
        unclaimed = pool.idle[0].process.pid
        other = tmp_path / "other"
        other.mkdir()
        await _answer(service, "answer cold", other)  # another cwd: a cold start
    cold, state = provider.ran_with[1]
    assert state is None  # a cold start never goes through open_ahead
    assert cold not in provider.ahead
    released = dict(provider.released)
    # The unclaimed product (released when the pool followed the other cwd), the cold
    # run and the pool's last product at close: each released once its tree was gone.
    assert released[unclaimed] == f"connected {unclaimed}"
    assert released[cold] is None
    assert set(released) == {process.pid for process in provider.spawned}
    # Each tree's teardown released it once the tree was gone (an unclaimed product's
    # state was released before its tree was ended, too).
    assert set(provider.gone) == set(released)


async def test_a_failed_open_ahead_never_fails_a_delegation(
    service: SubagentService, tmp_path: Path
) -> None:
    provider = AheadEcho(EchoConfig(warm=1), fail_ahead=True)
    service.register_provider(provider)
    service.keep_ready("echo", str(tmp_path))
    assert not await _pool(service).wait_ready()
    assert await _answer(service, "answer fine", tmp_path) == (COMPLETED, "fine", 1)
    pool = _pool(service)
    assert not await pool.wait_ready()  # the claim's one retry failed too
    assert (pool.stats.failed, pool.stats.cold, pool.stats.claimed) == (2, 1, 0)
    assert not any(process.tree_alive() for process in provider.spawned)
    assert {pid for pid, _ in provider.released} == {p.pid for p in provider.spawned}
