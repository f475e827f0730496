"""Evidence that composition starts no process: count every attempt to spawn one.

:class:`SpawnCounter` wraps the process-creation entry points every Python spawn path
ends in (``subprocess.Popen`` — used by asyncio, trio, anyio and the product SDKs —,
``os.fork``, ``os.forkpty``, ``os.posix_spawn``, ``os.posix_spawnp`` and ``os.system``)
for the duration of a ``with`` block. With ``forbid=True`` an attempt raises instead of
spawning, so a Loader bug cannot start a product even once.

One spawn is counted once: an entry point reached from inside another one on the same
thread (``subprocess.Popen`` calls ``os.posix_spawn`` on Python 3.13) is part of the
attempt already recorded.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

__all__ = ["SpawnAttemptError", "SpawnCounter"]

_OS_NAMES = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")


def _setter(target: object, name: str, value: object) -> Callable[[], None]:
    def restore() -> None:
        setattr(target, name, value)

    return restore


class SpawnAttemptError(RuntimeError):
    """Raised by a forbidding :class:`SpawnCounter` when something tries to start a process."""


class SpawnCounter:
    """Count (or forbid) process creation inside a ``with`` block.

    Attributes:
        attempts: ``(entry point, first argument)`` of every attempt, in order.
    """

    _lock = threading.RLock()  # a check inside a check (tests wrap `dsh check`) nests

    def __init__(self, *, forbid: bool = False) -> None:
        self.forbid = forbid
        self.attempts: list[tuple[str, str]] = []
        self._restore: list[Callable[[], None]] = []
        self._active = threading.local()  # per thread: inside one of this counter's hooks

    @property
    def count(self) -> int:
        """How many spawn attempts were seen."""
        return len(self.attempts)

    def _record(self, entry: str, args: tuple[Any, ...]) -> None:
        self.attempts.append((entry, repr(args[0])[:200] if args else ""))
        if self.forbid:
            raise SpawnAttemptError(f"process creation attempted through {entry} while forbidden")

    def _observe(self, entry: str, args: tuple[Any, ...], call: Callable[[], Any]) -> Any:
        """Record ``entry`` unless this thread is already inside a recorded attempt."""
        if getattr(self._active, "inside", False):
            return call()
        self._record(entry, args)
        self._active.inside = True
        try:
            return call()
        finally:
            self._active.inside = False

    def __enter__(self) -> SpawnCounter:
        SpawnCounter._lock.acquire()
        popen = subprocess.Popen  # noqa: TID251 (observed, never called directly)
        original_init = popen.__init__
        counter = self

        def popen_init(instance: Any, *args: Any, **kwargs: Any) -> None:
            counter._observe(
                "subprocess.Popen",
                args or (kwargs.get("args"),),
                lambda: original_init(instance, *args, **kwargs),
            )

        setattr(popen, "__init__", popen_init)  # noqa: B010 (patching a method)
        self._restore.append(_setter(popen, "__init__", original_init))
        for name in _OS_NAMES:
            original = getattr(os, name, None)
            if original is None:
                continue
            self._restore.append(_setter(os, name, original))
            setattr(os, name, self._wrap(f"os.{name}", original))
        return self

    def _wrap(self, entry: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self._observe(entry, args, lambda: original(*args, **kwargs))

        return wrapper

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            for restore in reversed(self._restore):
                restore()
            self._restore.clear()
        finally:
            SpawnCounter._lock.release()
