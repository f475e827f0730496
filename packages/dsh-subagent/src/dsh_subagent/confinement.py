"""A provider instance's confinement setting and the policy each of its runs gets.

Every out-of-process provider's configuration carries ``confinement``
(:class:`ConfinementSetting`): the mode (``auto`` by default, ``required``, ``off``) and
the paths and ports this instance adds. At each start the runtime computes the run's
policy (:func:`run_policy`) and hands it to dsh-subprocess, which applies it to the
product's whole process tree before the product's code runs (docs/security.md):

* read and execute: the system (:func:`dsh_subprocess.system_read_paths`), the
  product's own installation and its configured home (the provider's
  :class:`ProductReach`), the cwd, the git metadata a worktree's cwd points at, and the
  instance's ``read``;
* read and write: the cwd, the run's private directories (``HOME``, ``TMPDIR``, the
  ``XDG_*`` directories and product homes that the instance's ``env`` names, or a private
  temporary directory the runtime makes for the run), the product home the provider
  names, and the instance's ``write``;
* TCP connect: the ports of the model endpoint(s) the configuration names, and the
  instance's ``connect_ports``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsh_subprocess import (
    Confinement,
    ConfinementMode,
    collect_orphaned_dirs,
    landlock_abi,
    make_owned_dir,
    system_read_paths,
)
from pydantic import BaseModel, ConfigDict, field_validator

from dsh_subagent.confinement_paths import (
    env_endpoint_ports,
    git_paths,
    program_install,
    python_install,
)
from dsh_subagent.errors import SubagentError, SubagentErrorCode

__all__ = [
    "PRIVATE_DIR_VARIABLES",
    "ConfinementSetting",
    "ProductReach",
    "RunScratch",
    "check_confinement",
    "confinement_fallback_line",
    "confinement_refusal_line",
    "confines_commands",
    "default_reach",
    "run_policy",
]


PRIVATE_DIR_VARIABLES: tuple[str, ...] = (
    "HOME",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_TMPDIR",
)
"""Variables whose value, when the instance's ``env`` sets it, is one of the run's own
directories: writable by the run. Inherited values (the user's real ``HOME``) are not."""


def _absolute(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("a path must be a string")
    if "\0" in value:
        raise ValueError("a path must not contain NUL characters")
    if not value:
        raise ValueError("a path must not be empty")
    if any(unicodedata.category(char) == "Cc" for char in value):
        raise ValueError(f"{value!r}: a path must not contain control characters")
    path = os.path.abspath(os.path.expanduser(value))
    if path == os.sep:
        # The whole file system: your keys and every other run's directories. Spelled
        # out, not granted: mode "off" is the honest way to run a product unconfined.
        raise ValueError(
            f"{value!r} grants the whole file system: name the directories the product "
            'needs, or set mode = "off" to run it unconfined'
        )
    return path


class ConfinementSetting(BaseModel):
    """One provider instance's confinement: the mode and what the instance adds.

    Attributes:
        mode: ``auto`` (default), ``required`` or ``off`` (see :data:`ConfinementMode`).
        read: Extra directories or files the product may read and execute, beneath.
            ``~`` expands; a relative path resolves against the launch directory.
        write: Extra directories or files the product may read and write, beneath.
        connect_ports: Extra TCP ports the product may connect to (any host: a port
            rule does not name hosts; see docs/security.md).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ConfinementMode = "auto"
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    connect_ports: tuple[int, ...] = ()

    @field_validator("read", "write", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("must be a list of paths, not one string")
        if isinstance(value, list | tuple):
            return tuple(_absolute(item) for item in value)
        return value

    @field_validator("connect_ports", mode="before")
    @classmethod
    def _ports(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            for port in value:
                if isinstance(port, bool):
                    raise ValueError("a port must be a number, not true/false")
                if isinstance(port, int) and not 1 <= port <= 65535:
                    raise ValueError(f"{port!r} is not a TCP port (1-65535)")
        return value


@dataclass(frozen=True)
class ProductReach:
    """What one product needs beyond the system, computed by its provider at start.

    Attributes:
        read: Its installation (binary, bundled runtime) and read-only configuration.
        write: Its home when the product keeps state there (``CODEX_HOME``, the Claude
            config directory): directories, made private (``0700``) before a confined
            start when missing (see docs/security.md).
        connect_ports: The ports of the model endpoint(s) its configuration names.
        bind_ports: Loopback ports the product serves itself on and connects back to
            (an agent that talks to its own local server; also allowed to connect).
        cwd_writable: Whether the run may write its cwd (read only otherwise: a product
            whose own read-only sandbox the kernel policy stands in for).
        pseudo_terminals: Whether the product runs commands on a pseudo-terminal (it then
            gets ``/dev/ptmx`` and ``/dev/pts``; see docs/security.md).
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    connect_ports: tuple[int, ...] = field(default_factory=tuple)
    bind_ports: tuple[int, ...] = field(default_factory=tuple)
    cwd_writable: bool = True
    pseudo_terminals: bool = False


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for path in paths:
        if path:
            seen.setdefault(os.path.normpath(path), None)
    return tuple(seen)


def _private_dirs(env: Mapping[str, str | None]) -> list[str]:
    return [
        value
        for name in PRIVATE_DIR_VARIABLES
        if isinstance(value := env.get(name), str) and os.path.isabs(value)
    ]


def run_policy(
    setting: ConfinementSetting,
    reach: ProductReach,
    *,
    cwd: str,
    env: Mapping[str, str | None],
) -> Confinement | None:
    """The policy of one run: ``None`` when the instance's mode is ``off``.

    Args:
        setting: The instance's configured setting.
        reach: What the provider computed for its product.
        cwd: The run's working directory (the worktree, under worktree isolation).
        env: The run's environment overlay (launch env with the instance's ``env`` on top).
    """
    if setting.mode == "off":
        return None
    git_read, git_write = git_paths(cwd)
    own = [cwd, *git_write]
    mine = own if reach.cwd_writable else []
    write = _unique([*mine, *_private_dirs(env), *reach.write, *setting.write])
    seen = [] if reach.cwd_writable else own
    read = _unique([*system_read_paths(), *reach.read, *seen, *git_read, *setting.read])
    ports = tuple(sorted({*reach.connect_ports, *reach.bind_ports, *setting.connect_ports}))
    return Confinement(
        mode=setting.mode,
        read=read,
        write=write,
        connect_ports=ports,
        bind_ports=tuple(sorted(set(reach.bind_ports))),
        pseudo_terminals=reach.pseudo_terminals,
    )


def default_reach(argv: Sequence[str], env: Mapping[str, str | None]) -> ProductReach:
    """What any product needs: the launched program's installation (and the running
    Python's when the program is a Python interpreter), and the ports of the
    ``*_BASE_URL`` variables the environment overlay sets."""
    program = argv[0]
    search = env.get("PATH") or os.environ.get("PATH")
    read = program_install(program, search)
    resolved = [os.path.realpath(path) for path in read]
    if (
        os.path.basename(program).startswith("python")
        or os.path.dirname(os.path.realpath(sys.executable)) in resolved
    ):
        read += python_install()
    return ProductReach(read=tuple(read), connect_ports=tuple(sorted(env_endpoint_ports(env))))


def make_product_homes(setting: ConfinementSetting, reach: ProductReach) -> None:
    """Create the product homes a confined run is granted (``reach.write``) that do not
    exist yet, private to the user.

    Unconfined, a product makes its own home on first use (``~/.codex``, ``~/.claude``);
    confined, a grant of a missing path is skipped and its parent is not writable, so
    without this a first run on a fresh account fails (Codex cannot make its state) or
    quietly keeps nothing (Claude Code's sessions: a continuation handle that resumes
    nothing). A directory that cannot be made is left to the product to report.
    """
    if not confines_commands(setting):
        return
    for path in reach.write:
        if not os.path.lexists(path):
            with contextlib.suppress(OSError):
                os.makedirs(path, mode=0o700, exist_ok=True)


_SCRATCH_PREFIX = "dsh-run-"


class RunScratch:
    """A run's private temporary directory, made when the instance's ``env`` names no
    ``TMPDIR`` and the run is confined (the rest of ``/tmp`` is not writable), removed
    once the run's whole tree has exited.

    The directory names its host (:func:`dsh_subprocess.make_owned_dir`): a host killed
    outright (``kill -9``, the OOM killer) cannot remove it, and its guard ends the
    product tree without knowing it, so the next confined start in the same temporary
    directory removes every one whose host is gone.
    """

    __slots__ = ("path",)

    def __init__(self, path: str | None) -> None:
        self.path = path

    @classmethod
    def make(cls, setting: ConfinementSetting, env: Mapping[str, str | None]) -> RunScratch:
        """A fresh directory, or none (mode ``off``, or the instance's own ``TMPDIR``)."""
        if setting.mode == "off" or isinstance(env.get("TMPDIR"), str):
            return cls(None)
        base = tempfile.gettempdir()
        collect_orphaned_dirs(_SCRATCH_PREFIX, base)
        return cls(make_owned_dir(_SCRATCH_PREFIX, base))

    @property
    def env(self) -> dict[str, str]:
        """The overlay that points the product at the directory."""
        return {} if self.path is None else {"TMPDIR": self.path}

    def remove(self) -> None:
        """Remove the directory and what the run left in it (idempotent)."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def confines_commands(setting: ConfinementSetting) -> bool:
    """Whether a run of an instance with ``setting`` is confined by the kernel here (the
    mode is not ``off`` and the kernel offers Landlock)."""
    return setting.mode != "off" and landlock_abi() > 0


def confinement_fallback_line(modes: Iterable[ConfinementMode]) -> str | None:
    """The one line to show when ``auto`` instances will run unconfined, else ``None``."""
    if "auto" not in set(modes) or landlock_abi() > 0:
        return None
    return (
        "dsh: this kernel offers no Landlock: providers with confinement 'auto' run "
        "unconfined (see docs/security.md)"
    )


def confinement_refusal_line(modes: Iterable[ConfinementMode]) -> str | None:
    """The fixed refusal when a ``required`` instance cannot be confined, else ``None``."""
    if "required" not in set(modes) or landlock_abi() > 0:
        return None
    return (
        "confinement is required but this kernel offers no Landlock: nothing was "
        "started (set confinement mode 'auto' or 'off' to run unconfined)"
    )


def check_confinement(prefix: str, setting: ConfinementSetting) -> None:
    """Before anything starts, refuse a ``required`` instance the kernel cannot confine
    (``UNSUPPORTED_CAPABILITY``, a fixed line). An ``auto`` instance runs unconfined there;
    dsh-subprocess logs that once per process."""
    if setting.mode == "required" and landlock_abi() <= 0:
        raise SubagentError(
            SubagentErrorCode.UNSUPPORTED_CAPABILITY,
            f"{prefix}: confinement is required but this kernel offers no Landlock: "
            "nothing was started",
        )
