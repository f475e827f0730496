"""``spawn()``: check the spec's cwd, build the child environment, pick the spawn path.

Under the host-death guard a product goes, on Linux, through this host's guard server
(:mod:`._served`), falling back to a guard of its own when the server cannot take it;
elsewhere (or when ``DSH_SUBPROCESS_GUARD=portable`` forces it) under a portable guard
of its own. Without the guard it is started directly (:mod:`._direct`). A confinement is
resolved first (:func:`.confinement.resolve`): a ``required`` one the kernel cannot give
stops the spawn before anything starts.
"""

from __future__ import annotations

import contextlib
import os
import sys

from . import _guard_server, confinement
from ._direct import GuardMode, spawn_direct
from ._served import spawn_served
from ._stderr import StderrObserver
from .cwd import probe_cwd
from .env import child_env
from .errors import DshSubprocessError, InvalidCwdError
from .hostprotect import warn_if_exposed
from .process import ManagedProcess
from .spec import SpawnSpec

__all__ = ["spawn"]

GUARD_MODE_VARIABLE = "DSH_SUBPROCESS_GUARD"
"""The host environment setting that picks the guard: ``auto`` (default) or ``portable``."""


def guard_mode() -> GuardMode | None:
    """The guard a guarded spawn gets now, or ``None`` where no guard can run.

    ``auto`` picks the Linux guard on Linux and the portable one on every other POSIX
    system; ``portable`` forces the portable guard (on Linux too, so that it is tested).

    Raises:
        DshSubprocessError: The setting holds another value; nothing was started.
    """
    setting = os.environ.get(GUARD_MODE_VARIABLE, "auto")
    if setting not in ("auto", "portable"):
        raise DshSubprocessError(f"invalid {GUARD_MODE_VARIABLE}: expected 'auto' or 'portable'")
    if os.name != "posix":
        return None
    if setting == "portable" or sys.platform != "linux":
        return "portable"
    return "linux"


async def spawn(
    spec: SpawnSpec, *, stderr_observer: StderrObserver | None = None
) -> ManagedProcess:
    """Start ``spec`` in a new session and return the handle that owns its tree.

    Args:
        spec: What to run.
        stderr_observer: Called from a daemon thread with each stderr line (UTF-8,
            undecodable bytes replaced, trailing newline removed) when
            ``spec.stderr == "pipe"``. By default each line is logged unchanged at INFO
            on the ``dsh_subprocess.stderr`` logger; nothing is written to the host's
            stderr unless ``spec.stderr == "inherit"`` passes it through.

    Returns:
        The managed process. Always :meth:`~ManagedProcess.terminate` it (or use
        ``async with``).

    Raises:
        InvalidCwdError: ``spec.cwd`` is relative, missing, not a directory or not
            enterable (see :func:`~dsh_subprocess.probe_cwd`); nothing was started.
        SpawnError: The program could not be started; nothing is left running.
        ConfinementUnavailableError: ``spec.confinement`` is ``required`` and the kernel
            offers no Landlock, or the kernel refused the policy; nothing was started.
        DshSubprocessError: ``DSH_SUBPROCESS_GUARD`` holds an unknown value.
    """
    mode = guard_mode() if spec.host_death_guard else None
    problem = probe_cwd(spec.cwd)
    if problem is not None:
        raise InvalidCwdError(problem)
    policy = confinement.resolve(spec.confinement)
    env = child_env(spec.env)
    # A confined product cannot read this host's /proc entries; an unconfined one can
    # unless the host protected itself (warned once).
    warn_if_exposed(confined=policy is not None)
    proc: ManagedProcess | None = None
    if mode == "linux" and _guard_server.enabled:
        # ServerUnavailable: nothing was started; fall back to a guard of its own.
        with contextlib.suppress(_guard_server.ServerUnavailable):
            proc = await spawn_served(spec, env, policy, stderr_observer)
    if proc is None:
        proc = await spawn_direct(spec, env, mode, policy, stderr_observer)
    # The guard or the trampoline reported the product started: the policy was applied.
    proc._confined = policy is not None
    return proc
