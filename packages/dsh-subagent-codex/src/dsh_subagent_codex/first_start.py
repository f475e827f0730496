"""Serialise the first app-server start per ``CODEX_HOME`` inside this process.

Codex 0.163.0 creates its sqlite state under ``CODEX_HOME`` when an app-server starts.
Two app-servers doing that at the same moment on a fresh home race, and the loser exits
1 at ``initialize`` ("failed to initialize sqlite state runtime"); once one start has
initialised the home, concurrent starts are fine. So the first spawn→``initialize`` on a
home runs alone; as soon as one ``initialize`` on it has succeeded, every later start on
it runs concurrently and never touches the gate again. A failed first start releases the
gate (after its rollback) for the next one. There is no timeout: a waiter leaves through
its own cancellation only.
"""

from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Mapping
from typing import Final, Literal

import anyio
from dsh_subprocess import child_env

__all__ = ["FIRST_STARTS", "FirstStartGate", "FirstStartPass", "HomeKey", "effective_codex_home"]

HomeKey = str | None
"""A resolved ``CODEX_HOME`` path, or ``None`` when no home can be resolved at all."""


def _default_home(env: Mapping[str, str]) -> str | None:
    home = env.get("HOME")
    if home:
        return home
    try:  # what Codex's home-directory lookup falls back to without HOME
        return pwd.getpwuid(os.getuid()).pw_dir or None
    except KeyError:
        return None


def effective_codex_home(
    overlay: Mapping[str, str | None], cwd: str, environ: Mapping[str, str] | None = None
) -> HomeKey:
    """The ``CODEX_HOME`` the child will use, as a normalised absolute path.

    The child's environment is the scrubbed parent environment plus the instance
    overlay (the overlay wins, ``None`` removes a name); its ``CODEX_HOME`` if set and
    non-empty, else ``$HOME/.codex``. A relative value resolves against the child's
    ``cwd``, and symlinks are resolved so two spellings of one home share one gate.

    Args:
        overlay: The instance's ``env`` overlay.
        cwd: The child's working directory (absolute).
        environ: The parent environment; ``os.environ`` when omitted.
    """
    env = child_env(overlay, environ)
    home = env.get("CODEX_HOME") or None
    if home is None:
        user_home = _default_home(env)
        if user_home is None:
            return None
        home = os.path.join(user_home, ".codex")
    return os.path.realpath(os.path.join(cwd, home))


class FirstStartPass:
    """The right to run the first spawn→``initialize`` on one home.

    Exactly one of :meth:`initialized` or :meth:`release` ends it; both are idempotent
    and the first call wins.
    """

    __slots__ = ("_done", "_event", "_gate", "_key")

    def __init__(self, gate: FirstStartGate, key: HomeKey, event: anyio.Event | None) -> None:
        self._gate = gate
        self._key = key
        self._event = event
        self._done = event is None  # a pass for an already-initialised home holds nothing

    def initialized(self) -> None:
        """``initialize`` succeeded: mark the home and let every waiter run concurrently."""
        self._finish(initialized=True)

    def release(self) -> None:
        """The start failed or was cancelled: hand the gate to the next waiter."""
        self._finish(initialized=False)

    def _finish(self, *, initialized: bool) -> None:
        if self._done:
            return
        self._done = True
        self._gate._finish(self._key, initialized=initialized)
        assert self._event is not None
        self._event.set()


class FirstStartGate:
    """A registry of homes: initialised ones, and the one first start running per home.

    An entry holds an :class:`anyio.Event` only while a first start runs, so an idle
    registry keeps no object bound to an event loop: sequential event loops (asyncio,
    then trio, in one test process) share it safely.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._initialized: set[HomeKey] = set()
        self._starting: dict[HomeKey, anyio.Event] = {}
        self._waiting: dict[HomeKey, int] = {}

    async def acquire(self, key: HomeKey) -> FirstStartPass:
        """Return at once for an initialised home; otherwise wait for the gate.

        Cancellation while waiting leaves the gate untouched.
        """
        while True:
            with self._mutex:
                if key in self._initialized:
                    return FirstStartPass(self, key, None)
                running = self._starting.get(key)
                if running is None:
                    mine = anyio.Event()
                    self._starting[key] = mine
                    return FirstStartPass(self, key, mine)
                self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                await running.wait()
            finally:
                with self._mutex:
                    self._waiting[key] -= 1
                    if not self._waiting[key]:
                        del self._waiting[key]

    def state(self, key: HomeKey) -> Literal["fresh", "starting", "initialized"]:
        """Where ``key`` stands in this process (observability and tests)."""
        with self._mutex:
            if key in self._initialized:
                return "initialized"
            return "starting" if key in self._starting else "fresh"

    def waiters(self, key: HomeKey) -> int:
        """How many starts wait for the first start on ``key`` right now."""
        with self._mutex:
            return self._waiting.get(key, 0)

    def _finish(self, key: HomeKey, *, initialized: bool) -> None:
        with self._mutex:
            self._starting.pop(key, None)
            if initialized:
                self._initialized.add(key)


FIRST_STARTS: Final = FirstStartGate()
"""The process-wide gate every :class:`~dsh_subagent_codex.CodexProvider` uses."""
