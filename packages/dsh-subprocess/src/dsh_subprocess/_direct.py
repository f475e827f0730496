"""The direct spawn path: the product, or a guard of its own, as this host's child.

Without the host-death guard the product itself is started in a new session. With it
the host starts the guard in a new session, passing it the status pipe's and the
lifeline's fds; the guard starts the product. That guard is ``_guard.py`` (Linux: the
guard server's fallback) or ``_portable_guard.py`` (elsewhere, or forced). A confined
product is confined by its guard; without a guard, by the exec trampoline
``_landlock.py``, which confines itself and then execs the product in the same process
(one interpreter start, only for a confined spawn without the guard).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import psutil

from . import _landlock
from ._fdstream import close_quietly
from ._guard_server import GUARD_PATH
from ._landlock import Policy
from ._stderr import StderrObserver, start_drain
from .errors import ConfinementUnavailableError, SpawnError
from .process import ManagedProcess, adopt
from .spec import SpawnSpec

__all__ = ["PORTABLE_GUARD_PATH", "GuardMode", "spawn_direct"]

GuardMode = Literal["linux", "portable"]
"""The guard a guarded spawn gets: ``_guard.py`` (Linux) or ``_portable_guard.py``."""

PORTABLE_GUARD_PATH = str(Path(__file__).with_name("_portable_guard.py"))
LANDLOCK_PATH = str(Path(__file__).with_name("_landlock.py"))
# The portable guard runs with ``-S`` (no site: a faster start) and is told where psutil is.
_PSUTIL_DIR = str(Path(psutil.__file__).resolve().parent.parent)


async def spawn_direct(
    spec: SpawnSpec,
    env: dict[str, str],
    mode: GuardMode | None,
    policy: Policy | None,
    stderr_observer: StderrObserver | None,
) -> ManagedProcess:
    """Start ``spec`` as this host's child: the product itself, or its guard of ``mode``.

    Raises:
        SpawnError: The program (or the guard's interpreter) could not be started;
            nothing is left running.
        ConfinementUnavailableError: The kernel refused ``policy``; nothing started.
    """
    stdio: dict[str, Any] = {
        "stdin": subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL,
        "stdout": subprocess.PIPE if spec.stdout == "pipe" else subprocess.DEVNULL,
    }
    opened: list[int] = []
    stderr_r: int | None = None
    status_r: int | None = None
    lifeline_w: int | None = None
    report_r: int | None = None
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
        word = "-" if policy is None else _landlock.encode(policy)
        lc_ctype = "-" if "LC_CTYPE" not in env else "=" + env["LC_CTYPE"]
        if mode is None and policy is not None:
            report_r, report_w = os.pipe()
            opened += [report_r, report_w]
            parent_only_closes.append(report_w)
            argv = [sys.executable, "-I", "-S", LANDLOCK_PATH, str(report_w), lc_ctype, word, *argv]
            pass_fds = (report_w,)
        elif mode is not None:
            status_r, status_w = os.pipe()
            lifeline_r, lifeline_w = os.pipe()
            opened += [status_r, status_w, lifeline_r, lifeline_w]
            parent_only_closes += [status_w, lifeline_r]
            os.set_blocking(status_r, False)
            fds = [str(status_w), str(lifeline_r), lc_ctype]
            if mode == "portable":
                guard = [PORTABLE_GUARD_PATH, *fds, repr(spec.grace), _PSUTIL_DIR, word]
            else:
                guard = [GUARD_PATH, *fds, word]
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
    if report_r is not None:
        await _trampoline_outcome(process, report_r, stderr_r, lifeline_w)
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


async def _trampoline_outcome(
    process: anyio.abc.Process, report_r: int, *also_close: int | None
) -> None:
    """Wait until the trampoline has exec'd the product, or raise what stopped it.

    Its report pipe's write end is close-on-exec: EOF with nothing said is a started
    product; ``L`` or ``E`` and an errno is a refused confinement or a failed exec, after
    which the trampoline has exited and is reaped here.
    """
    report = b""
    try:
        with anyio.CancelScope(shield=True):
            os.set_blocking(report_r, False)
            while True:
                try:
                    chunk = os.read(report_r, 64)
                except BlockingIOError:
                    await anyio.wait_readable(report_r)
                    continue
                if not chunk:
                    break
                report += chunk
            if not report:
                return
            await process.wait()
    finally:
        close_quietly(report_r)
    close_quietly(*(fd for fd in also_close if fd is not None))
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            await stream.aclose()
    kind, _, number = report.decode("ascii", "replace").partition(" ")
    code = int(number) if number.strip().isdigit() else 0
    cause = OSError(code, os.strerror(code))
    if kind == "L":
        raise ConfinementUnavailableError(errno=code) from cause
    raise SpawnError(errno=code or None) from cause
