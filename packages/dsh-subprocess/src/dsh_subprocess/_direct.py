"""The direct spawn path: the product, or a guard of its own, as this host's child.

Without the host-death guard the product itself is started in a new session. With it
the host starts the guard in a new session, passing it the status pipe's and the
lifeline's fds; the guard starts the product. That guard is ``_guard.py`` (Linux: the
guard server's fallback) or ``_portable_guard.py`` (elsewhere, or forced).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil

from ._fdstream import close_quietly
from ._guard_server import GUARD_PATH
from ._stderr import StderrObserver, start_drain
from .errors import SpawnError
from .process import ManagedProcess, adopt
from .spec import SpawnSpec

if TYPE_CHECKING:
    from ._spawn import GuardMode

__all__ = ["PORTABLE_GUARD_PATH", "spawn_direct"]

PORTABLE_GUARD_PATH = str(Path(__file__).with_name("_portable_guard.py"))
# The portable guard runs with ``-S`` (no site: a faster start) and is told where psutil is.
_PSUTIL_DIR = str(Path(psutil.__file__).resolve().parent.parent)


async def spawn_direct(
    spec: SpawnSpec,
    env: dict[str, str],
    mode: GuardMode | None,
    stderr_observer: StderrObserver | None,
) -> ManagedProcess:
    """Start ``spec`` as this host's child: the product itself, or its guard of ``mode``.

    Raises:
        SpawnError: The program (or the guard's interpreter) could not be started;
            nothing is left running.
    """
    stdio: dict[str, Any] = {
        "stdin": subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL,
        "stdout": subprocess.PIPE if spec.stdout == "pipe" else subprocess.DEVNULL,
    }
    opened: list[int] = []
    stderr_r: int | None = None
    status_r: int | None = None
    lifeline_w: int | None = None
    parent_only_closes: list[int] = []
    try:
        if spec.stderr == "pipe":
            stderr_r, stderr_w = os.pipe()
            opened += [stderr_r, stderr_w]
            parent_only_closes.append(stderr_w)
            stdio["stderr"] = stderr_w
        else:
            stdio["stderr"] = subprocess.DEVNULL if spec.stderr == "devnull" else None
        argv: list[str] = list(spec.argv)
        pass_fds: tuple[int, ...] = ()
        if mode is not None:
            status_r, status_w = os.pipe()
            lifeline_r, lifeline_w = os.pipe()
            opened += [status_r, status_w, lifeline_r, lifeline_w]
            parent_only_closes += [status_w, lifeline_r]
            os.set_blocking(status_r, False)
            lc_ctype = "-" if "LC_CTYPE" not in env else "=" + env["LC_CTYPE"]
            fds = [str(status_w), str(lifeline_r), lc_ctype]
            if mode == "portable":
                guard = [PORTABLE_GUARD_PATH, *fds, repr(spec.grace), _PSUTIL_DIR]
            else:
                guard = [GUARD_PATH, *fds]
            argv = [sys.executable, "-I", "-S", *guard, *argv]
            pass_fds = (status_w, lifeline_r)
        try:
            with anyio.CancelScope(shield=True):
                process = await anyio.open_process(
                    argv,
                    cwd=spec.cwd,
                    env=env,
                    start_new_session=True,
                    pass_fds=pass_fds,
                    **stdio,
                )
        except OSError as exc:
            raise SpawnError(errno=exc.errno) from exc
    except BaseException:
        close_quietly(*opened)
        raise
    close_quietly(*parent_only_closes)
    proc = ManagedProcess(
        spec,
        process,
        guarded=mode is not None,
        portable=mode == "portable",
        status_fd=status_r,
        lifeline_fd=lifeline_w,
        stderr_drain=start_drain(stderr_r, stderr_observer),
    )
    return await adopt(proc, handshake=mode is not None)
