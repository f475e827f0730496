"""The host's environment and memory, kept from the products it spawns (Linux).

A product runs as the same user as its host. On Linux any same-user process can read
``/proc/<host pid>/environ`` and ``/proc/<host pid>/mem`` and ptrace-attach to the host
unless the host is not *dumpable*: then the kernel allows those only to a process with
``CAP_SYS_PTRACE``. :func:`protect_host_process` makes this process not dumpable (see
``docs/security.md``, "The host's environment"). It is the host's decision, so the
library never does it by itself: it also turns off core dumps of the whole process and
refuses debuggers (gdb, py-spy) that attach to it as the same user.

The first unconfined spawn of a host that did not opt in logs one warning naming the
exposure (``dsh_subprocess`` logger).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading

__all__ = ["host_process_protected", "protect_host_process"]

_logger = logging.getLogger("dsh_subprocess")

_LINUX = sys.platform == "linux"  # a variable, so type checkers keep both branches

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4

_libc: ctypes.CDLL | None = None
_warned = False
_warn_lock = threading.Lock()


def _prctl(option: int, value: int = 0) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return int(_libc.prctl(option, value, 0, 0, 0))


def protect_host_process() -> bool:
    """Make this process not dumpable, so products cannot read its environment or memory.

    On Linux this is ``prctl(PR_SET_DUMPABLE, 0)``. From then on a process of the same
    user without ``CAP_SYS_PTRACE`` (every ordinary product) is refused
    ``/proc/<pid>/environ``, ``mem``, ``maps`` and the other ptrace-checked files of this
    process, and ptrace attach. ``/proc/<pid>/cmdline`` stays world-readable: never put a
    secret on a command line. The setting covers every thread and stays until ``execve``
    (a spawned product starts dumpable again; a ``fork`` child inherits it).

    It changes the whole host: no core dump is written, and a debugger or profiler that
    attaches to the running process (gdb, py-spy, perf of another process) needs
    ``CAP_SYS_PTRACE`` (root, or ``sudo``). Call it early, before secrets are loaded.

    Returns:
        ``True`` when the process is now not dumpable; ``False`` on a platform where dsh
        cannot do this (every one but Linux: see ``docs/security.md``).
    """
    if not _LINUX:
        return False
    _prctl(_PR_SET_DUMPABLE, 0)
    return host_process_protected()


def host_process_protected() -> bool:
    """Tell whether this process is not dumpable (Linux), by whatever means it became so."""
    if not _LINUX:
        return False
    return _prctl(_PR_GET_DUMPABLE) == 0


def warn_if_exposed(*, confined: bool) -> None:
    """Log, once per process, that a spawned product can read this host's environment.

    Called by every spawn: ``confined`` says whether the kernel keeps this product from
    the host's ``/proc`` entries by other means (the spawn's confinement in effect).
    """
    global _warned
    if confined:
        return
    with _warn_lock:
        # Checked at each spawn until the warning is given: the host may opt in later.
        if _warned or host_process_protected():
            return
        _warned = True
    if _LINUX:
        _logger.warning(
            "products spawned by this process run as the same user and can read its "
            "environment and memory (/proc/%d/environ, /proc/%d/mem, ptrace); call "
            "dsh_subprocess.protect_host_process() early in the host, or run products "
            "confined (docs/security.md)",
            os.getpid(),
            os.getpid(),
        )
    else:
        _logger.warning(
            "products spawned by this process run as the same user and may read its "
            "environment; dsh cannot prevent this on %s (docs/security.md)",
            sys.platform,
        )
