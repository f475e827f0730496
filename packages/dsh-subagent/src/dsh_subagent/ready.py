"""Ready products: started and past their handshake before the task arrives.

A provider instance whose configuration sets ``warm = N`` (and whose provider declares
``offers_ready_starts``) gets a :class:`ReadyPool` from the service that runs it: up to
``N`` products spawned exactly as a cold start spawns them (the instance's scrubbed
environment, its confinement, the host-death guard) and taken through ``open()`` and
the provider's ``open_ahead()`` (what of its handshake a cold start does only with the
task, :class:`~dsh_subagent.product_ready.ProductReadyHooks`). A delegation claims one
and a replacement starts in the background.

The rules (docs/rules.md):

* ``ready:one-delegation-per-product``: a claimed product leaves the pool for good; it
  serves exactly one delegation and its tree ends as a cold run's does.
* ``ready:indistinguishable``: the claimed product is handed the task, the budget and
  the run id exactly where a cold start would be after ``open()``; the result,
  diagnostic, usage and events are a cold run's.
* ``ready:never-fails-a-delegation``: a product that died while idle, or whose
  preparation failed, is never claimed: the delegation starts cold (counted in
  :class:`ReadyStats` and logged on ``dsh_subagent``).
* ``ready:keyed``: a product is prepared for what a cold start fixes at spawn (the cwd,
  whether progress carries commands) and only claimed by a delegation with the same
  values; a continuation always starts cold.
* ``ready:keyed`` for a wrapper that prepares the directories its runs work in (worktree
  isolation's warm pool, :class:`HoldsReady`): the pool is *per key*, one product for
  each directory the wrapper says is handed out next (:meth:`ReadyPool.hold`), claimed
  only by the delegation working there; a delegation anywhere else starts cold.
* ``ready:close-leaves-nothing``: closing the pool (the service's exit) ends every idle
  and every half-prepared product's whole tree; a host killed outright leaves none
  either (each tree has dsh-subprocess's host-death guard).

The pool reaches the provider through a context variable the service sets around
``provider.start()`` (:func:`~dsh_subagent.product_ready.ready_pool_for`): the provider's
``start()`` signature stays the plugin contract's.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio
from anyio.abc import TaskGroup

from dsh_subagent.errors import SubagentError
from dsh_subagent.product import ProductProvider
from dsh_subagent.product_child import ProductChild
from dsh_subagent.product_ready import ReadyKey, ready_pool_for, release_unclaimed
from dsh_subagent.workdir import resolve_child_cwd

if TYPE_CHECKING:
    from dsh_subagent.types import SubagentProvider

__all__ = [
    "HoldsReady",
    "ReadyKey",
    "ReadyPool",
    "ReadyStats",
    "prepare_product",
    "ready_pool_for",
]

_log = logging.getLogger("dsh_subagent")


@dataclass
class ReadyStats:
    """Counters of one pool (all monotonic).

    Attributes:
        prepared: Products that became ready.
        claimed: Delegations served by a ready product.
        cold: Delegations that found no ready product for their key and started cold.
        fallbacks: Ready products found dead at claim (the delegation started cold).
        failed: Preparations that failed (spawn or handshake); none was claimed.
    """

    prepared: int = 0
    claimed: int = 0
    cold: int = 0
    fallbacks: int = 0
    failed: int = 0


@runtime_checkable
class HoldsReady(Protocol):
    """A provider wrapping a product provider, whose runs work in directories it prepares
    ahead (worktree isolation's warm pool): the service keeps the inner provider's ready
    products in those directories through a per-key :class:`ReadyPool`."""

    @property
    def inner(self) -> SubagentProvider:
        """The wrapped provider."""
        ...

    def hold_ready(self, pool: ReadyPool, progress_commands: bool) -> bool:
        """Tell ``pool`` (:meth:`ReadyPool.hold`) the directories handed out next, now and
        whenever they change; returns whether the wrapper prepares any."""
        ...


def _key_of(child: ProductChild) -> ReadyKey:
    return (child.cwd, child.include_commands)


def _alive(child: ProductChild) -> bool:
    # The guard's status report first (free); then the tree itself, for a product killed
    # so recently that its guard has not reported yet.
    return child.exit_facts is None and child.process.tree_alive()


class ReadyPool:
    """Up to ``size`` ready products of one provider instance, for one key at a time.

    The key follows the delegations: a claim for another key releases the products
    prepared for the old one and prepares for the new one, so an instance never holds
    more than ``size`` idle products. Background work runs in ``task_group`` (the
    service's) and never raises into it.
    """

    def __init__(
        self,
        provider: ProductProvider[Any],
        size: int,
        task_group: TaskGroup,
        *,
        per_key: bool = False,
    ) -> None:
        self.provider = provider
        self.size = size
        self.per_key = per_key
        """One product for each key :meth:`hold` names, instead of ``size`` for one key."""
        self._wanted: list[ReadyKey] = []
        self._pending: set[ReadyKey] = set()
        self.stats = ReadyStats()
        self._task_group = task_group
        self._key: ReadyKey | None = None
        self._idle: list[ProductChild] = []
        self._preparing = 0
        self._stalled = False
        self._closed = False
        self._scopes: set[anyio.CancelScope] = set()
        self._busy = 0
        self._quiet: anyio.Event | None = None
        self._changed = anyio.Event()

    @property
    def idle(self) -> tuple[ProductChild, ...]:
        """The products ready now (for tests and measurements)."""
        return tuple(self._idle)

    async def wait_ready(self) -> bool:
        """Wait until the pool is full for its key, or no preparation is under way
        (one failed, or the pool closed); returns whether it is full."""
        while len(self._idle) < self._target() and self._preparing and not self._closed:
            self._changed = anyio.Event()
            await self._changed.wait()
        return len(self._idle) >= self._target()

    def _target(self) -> int:
        return len(self._wanted) if self.per_key else self.size

    def _wants(self, key: ReadyKey) -> bool:
        if not self.per_key:
            return key == self._key
        return key in self._wanted and all(_key_of(child) != key for child in self._idle)

    def hold(self, keys: Sequence[ReadyKey]) -> None:
        """Per-key pools: keep one product ready for each of the first ``size`` keys
        (their cwds resolved as a start resolves them) and end the others' products."""
        if self._closed or not self.per_key:
            return
        wanted: list[ReadyKey] = []
        for cwd, commands in keys:
            try:
                resolved = resolve_child_cwd(self.provider.prefix, self.provider.config.cwd, cwd)
            except SubagentError:
                continue  # a delegation there fails with the cwd's own message
            if (resolved, commands) not in wanted:
                wanted.append((resolved, commands))
        self._wanted = wanted[: self.size]
        kept: list[ProductChild] = []
        for child in self._idle:
            if _key_of(child) in self._wanted:
                kept.append(child)
            else:
                self._background(self._release_quietly, child)
        self._idle = kept
        self._stalled = False
        self._refill()

    def prepare(self, key: ReadyKey) -> None:
        """Keep products ready for ``key`` from now on (a surface that knows its cwd)."""
        if self._closed or self.per_key:
            return
        if key != self._key:
            stale, self._idle = self._idle, []
            for child in stale:
                self._background(self._release_quietly, child)
            self._key = key
        self._stalled = False  # a failed preparation is retried once per claim, not in a loop
        self._refill()

    def claim(self, key: ReadyKey) -> ProductChild | None:
        """Take a live product prepared for ``key`` out of the pool, or ``None`` (start
        cold); either way the pool refills for ``key`` in the background."""
        if self._closed:
            return None
        if self.per_key:
            # The key's directory is taken: the wrapper names it again once it is idle.
            self._wanted = [wanted for wanted in self._wanted if wanted != key]
        else:
            self.prepare(key)
        while True:
            found = [child for child in self._idle if _key_of(child) == key]
            if not found:
                break
            child = found[0]
            self._idle.remove(child)
            if _alive(child):
                self.stats.claimed += 1
                self._refill()
                return child
            self.stats.fallbacks += 1
            _log.warning(
                '%s "%s": a ready product (pid %d) died while idle; the delegation starts cold',
                self.provider.prefix,
                self.provider.name,
                child.process.pid,
            )
            self._background(self._release_quietly, child)
        self.stats.cold += 1
        self._refill()
        return None

    async def aclose(self) -> None:
        """End every ready and half-prepared product's tree; nothing is prepared again."""
        self._closed = True
        for scope in list(self._scopes):
            scope.cancel()
        idle, self._idle = self._idle, []
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for child in idle:
                    group.start_soon(self._release_quietly, child)
            while self._busy:
                self._quiet = anyio.Event()
                await self._quiet.wait()

    # -- background ---------------------------------------------------------------------

    def _refill(self) -> None:
        if self.per_key:
            for wanted in self._wanted:
                if self._closed or self._stalled:
                    return
                if wanted in self._pending or not self._wants(wanted):
                    continue
                self._pending.add(wanted)
                self._preparing += 1
                self._background(self._prepare_one, wanted)
            return
        key = self._key
        while (
            key is not None
            and not self._closed
            and not self._stalled
            and len(self._idle) + self._preparing < self.size
        ):
            self._preparing += 1
            self._background(self._prepare_one, key)

    def _background(self, work: Any, *args: Any) -> None:
        self._busy += 1

        async def run() -> None:
            try:
                await work(*args)
            except Exception as exc:  # never into the service's task group
                _log.error("%s: ready-product work failed: %r", self.provider.prefix, exc)
            finally:
                self._busy -= 1
                if self._busy == 0 and self._quiet is not None:
                    self._quiet.set()

        self._task_group.start_soon(run)

    async def _prepare_one(self, key: ReadyKey) -> None:
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        child: ProductChild | None = None
        try:
            with scope:
                child = await prepare_product(self.provider, key)
        except Exception as exc:
            self.stats.failed += 1
            self._stalled = True
            _log.warning(
                '%s "%s": preparing a ready product failed (%s); delegations start cold',
                self.provider.prefix,
                self.provider.name,
                exc,
            )
        finally:
            self._scopes.discard(scope)
            self._pending.discard(key)
            self._preparing -= 1
            self._changed.set()
        if child is None:
            return
        if self._closed or not self._wants(key):
            await self._release_quietly(child)
            return
        self.stats.prepared += 1
        self._idle.append(child)
        self._changed.set()

    async def _release_quietly(self, child: ProductChild) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await release_unclaimed(self.provider, child)
            except Exception as exc:
                _log.error(
                    "%s: ending a ready product's tree failed: %r", self.provider.prefix, exc
                )


async def prepare_product(provider: ProductProvider[Any], key: ReadyKey) -> ProductChild:
    """Spawn and open one product for ``key`` as a cold start does, before any task.

    The spawn, the admission gate and ``open()`` are the cold start's, then the
    provider's ``open_ahead()`` (inside the gate: it is the handshake); the run id is
    drawn now (the product's stderr lines carry it). On any failure or cancellation the
    whole tree is ended before the error propagates.
    """
    cwd, include_commands = key
    spec, scratch = provider._spawn_spec(cwd, None)
    run_id = str(uuid.uuid4())
    child: ProductChild | None = None
    try:
        async with contextlib.AsyncExitStack() as gate:
            manager = provider.admission(cwd)
            admission = None if manager is None else await gate.enter_async_context(manager)
            with anyio.CancelScope(shield=True):  # a spawn is quick and atomic
                process = await provider._spawn(spec, run_id)
            child = provider._new_child(process, cwd, run_id, [], admission, include_commands, None)
            child.scratch = scratch
            await provider.open(child)
            await provider.open_ahead(child)
    except BaseException:
        with anyio.CancelScope(shield=True):
            if child is None:
                scratch.remove()
            else:
                await release_unclaimed(provider, child)
        raise
    return child
