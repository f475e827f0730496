"""Managed process trees that never outlive their owner.

``dsh_subprocess`` is the single owner of spawning product processes: credential
scrubbing of the child environment (by name, and by a URL password in the value), a new
session per child, the host-death guard, TERM→grace→KILL of the whole tree (descendants
that called ``setsid`` included), whole-tree exit observation, exit facts and stderr
draining, and the kernel confinement (Landlock) of the product's whole tree.
:func:`protect_host_process` is the host's opt-in that keeps its own environment and
memory from the products (Linux).
"""

import logging

from ._guard_server import GUARD_PATH, guard_server_pid, shutdown_guard_server
from ._hostexit import kill_all_trees_now
from ._spawn import spawn
from ._stderr import StderrObserver
from ._until_exit import ExitingProcess, StdoutUntilExit
from .confinement import (
    DEVICE_PATHS,
    PTY_PATHS,
    Confinement,
    ConfinementMode,
    EffectiveConfinement,
    landlock_abi,
    system_read_paths,
)
from .cwd import probe_cwd
from .env import (
    check_env_overlay,
    child_env,
    is_scrubbed_name,
    is_scrubbed_value,
    scrubbed_parent_env,
)
from .errors import (
    ConfinementUnavailableError,
    CwdProblem,
    DshSubprocessError,
    InvalidCwdError,
    SpawnError,
)
from .facts import ExitFacts, signal_name
from .hostprotect import host_process_protected, protect_host_process
from .owned_dirs import collect_orphaned_dirs, make_owned_dir
from .process import ManagedProcess
from .spec import MAX_GRACE_SECONDS, SpawnSpec, StderrMode, StdioMode

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_subprocess").addHandler(logging.NullHandler())

__all__ = [
    "DEVICE_PATHS",
    "GUARD_PATH",
    "MAX_GRACE_SECONDS",
    "PTY_PATHS",
    "Confinement",
    "ConfinementMode",
    "ConfinementUnavailableError",
    "CwdProblem",
    "DshSubprocessError",
    "EffectiveConfinement",
    "ExitFacts",
    "ExitingProcess",
    "InvalidCwdError",
    "ManagedProcess",
    "SpawnError",
    "SpawnSpec",
    "StderrMode",
    "StderrObserver",
    "StdioMode",
    "StdoutUntilExit",
    "check_env_overlay",
    "child_env",
    "collect_orphaned_dirs",
    "guard_server_pid",
    "host_process_protected",
    "is_scrubbed_name",
    "is_scrubbed_value",
    "kill_all_trees_now",
    "landlock_abi",
    "make_owned_dir",
    "probe_cwd",
    "protect_host_process",
    "scrubbed_parent_env",
    "shutdown_guard_server",
    "signal_name",
    "spawn",
    "system_read_paths",
]
