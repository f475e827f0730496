"""The ``dsh`` and ``dsh-mcp`` commands and dsh's Ray actors keep their memory to themselves.

Each makes its own process not dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``) as its
first act, so a product running as the same user cannot read the command's environment
(``/proc/<pid>/environ``) or memory, nor ptrace-attach to it (``docs/security.md``, "The
host's environment"). This also turns off core dumps of the command and refuses a
same-user debugger; ``DSH_KEEP_DUMPABLE=1`` keeps the process dumpable for debugging
(``docs/cli.md``).

Standard library only: the console scripts call it before importing anything else, to
keep the start-up window (while the process is still readable) short.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["KEEP_DUMPABLE_VARIABLE", "protect_command_process", "protect_ray_actor_process"]

KEEP_DUMPABLE_VARIABLE = "DSH_KEEP_DUMPABLE"
"""Set to ``1`` to keep a dsh command dumpable (core dumps, ``gdb -p``, ``py-spy dump``)."""

_PR_SET_DUMPABLE = 4


def protect_command_process() -> bool:
    """Make this process not dumpable unless ``DSH_KEEP_DUMPABLE`` asks otherwise.

    Returns:
        Whether the process was made not dumpable (never on platforms other than Linux).
    """
    if sys.platform != "linux" or os.environ.get(KEEP_DUMPABLE_VARIABLE, "") not in ("", "0"):
        return False
    return int(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


def protect_ray_actor_process() -> bool:
    """:func:`protect_command_process`, in a Ray actor's worker process only.

    An actor class built outside Ray (a test, a host calling it directly) leaves its
    host as it is: changing core dumps and debugger attach of a host is its own choice.
    """
    ray = sys.modules.get("ray")  # an actor's worker has imported Ray; nothing imports it here
    if ray is None:
        return False
    try:
        # Deliberate order: get_runtime_context() starts a local Ray instance in a process
        # that imported Ray without connecting; an actor's worker is always connected.
        in_actor = ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # a Ray without a runtime context here: not an actor of dsh's
        return False
    return in_actor and protect_command_process()
