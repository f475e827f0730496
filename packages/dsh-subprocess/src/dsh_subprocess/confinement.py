"""Kernel confinement of a product's whole tree: the policy, what this kernel enforces of it.

A :class:`Confinement` on a :class:`~dsh_subprocess.SpawnSpec` is applied by Landlock
(Linux) to the product's process right before it executes, so it binds the product and
everything it starts, and cannot be loosened by them. ``docs/security.md`` says what the
kernel enforces and what it does not.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from . import _landlock
from .errors import ConfinementUnavailableError

__all__ = [
    "DEVICE_PATHS",
    "PTY_PATHS",
    "Confinement",
    "ConfinementMode",
    "EffectiveConfinement",
    "landlock_abi",
    "system_read_paths",
]

_log = logging.getLogger("dsh_subprocess.confinement")

ConfinementMode = Literal["auto", "required", "off"]

_SYSTEM_READ_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    # /etc/resolv.conf is a symlink into here where systemd-resolved runs; the kernel
    # checks the file a symlink resolves to.
    "/run/systemd/resolve",
    "/proc",
    "/sys",
    "/nix/store",
)

DEVICE_PATHS: tuple[tuple[str, Literal["rw", "read"]], ...] = (
    ("/dev/null", "rw"),
    ("/dev/zero", "rw"),
    ("/dev/full", "rw"),
    ("/dev/tty", "rw"),
    ("/dev/random", "read"),
    ("/dev/urandom", "read"),
)
"""The device files every confined tree gets whatever its policy says (programs expect
them): read, write, truncate and terminal ioctls on ``/dev/null``, ``/dev/zero``,
``/dev/full`` and ``/dev/tty`` (the caller's controlling terminal: a product started in
a session of its own has none); read on ``/dev/random`` and ``/dev/urandom``. Nothing
else under ``/dev``: no disks, no ``/dev/shm``, and no pseudo-terminals unless the
policy asks for them (``pseudo_terminals``)."""

PTY_PATHS = ("/dev/ptmx", "/dev/pts")
"""What ``Confinement(pseudo_terminals=True)`` adds, with terminal ioctls."""


def system_read_paths() -> tuple[str, ...]:
    """The operating system's directories a program needs to run: read and execute beneath.

    ``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``, ``/run/systemd/resolve`` (where
    ``/etc/resolv.conf`` points on systemd hosts), ``/proc``, ``/sys`` and ``/nix/store``,
    plus the file ``/etc/resolv.conf`` resolves to when it lies elsewhere (the kernel
    checks the target of a symlink, and name resolution reads it); those missing on this
    system are skipped when the policy is applied. Not included on
    purpose: the home directory, ``/tmp``, ``/var``, ``/opt``, ``/srv``, ``/mnt`` and
    ``/media``. Files under ``/etc`` stay as readable as the user's permissions make
    them. ``/proc`` is readable, but another process's ``environ``, memory, root and
    working directory are refused to an ordinary user by the kernel's ptrace scoping
    (``docs/security.md`` has the details, root included).
    """
    resolv = os.path.realpath("/etc/resolv.conf")
    covered = any(resolv.startswith(path + "/") for path in _SYSTEM_READ_PATHS)
    return _SYSTEM_READ_PATHS if covered else (*_SYSTEM_READ_PATHS, resolv)


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers, 0 where it offers none.

    0 on every system but Linux, on a kernel older than 5.13, where Landlock is not
    enabled at boot, or where a seccomp filter hides the syscall.
    """
    return _landlock.abi()


def _check_path(value: str) -> str:
    if "\0" in value:
        raise ValueError("the path must not contain NUL characters")
    if not os.path.isabs(value):
        raise ValueError(f"expected an absolute path, got {value!r}")
    return os.path.normpath(value)


def _fs_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in _landlock.FS_NAMES.items() if mask & bit)


class EffectiveConfinement(BaseModel):
    """What the kernel enforces of a :class:`Confinement` here, as data (for ``dsh check``).

    Attributes:
        mode: The policy's mode.
        abi: The kernel's Landlock ABI (0: none).
        enforced: Whether a spawn with this policy is confined at all.
        fs_rights: The filesystem rights the kernel mediates (each denied unless a rule
            grants it); empty when nothing is enforced.
        read: The read+execute paths (system paths included when the policy lists them).
        write: The read+write+execute paths.
        devices: The device files the tree gets (:data:`DEVICE_PATHS`, and
            :data:`PTY_PATHS` with ``pseudo_terminals``).
        missing: Policy paths that do not exist now (skipped when applied).
        tcp: Whether TCP bind and connect are filtered by port (ABI 4 and the policy).
        connect_ports: The TCP ports the tree may connect to, when ``tcp``.
        bind_ports: The TCP ports the tree may bind, when ``tcp``.
        scoped: ``abstract_unix_socket`` and ``signal`` from ABI 6: the tree cannot reach
            an abstract unix socket nor signal a process outside it.
        not_enforced: What the kernel does not stop here, as short names (``udp``,
            ``pathname_unix_socket``, and ``tcp``, ``signal``,
            ``abstract_unix_socket`` on older ABIs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ConfinementMode
    abi: int
    enforced: bool
    fs_rights: tuple[str, ...]
    read: tuple[str, ...]
    write: tuple[str, ...]
    devices: tuple[str, ...]
    missing: tuple[str, ...]
    tcp: bool
    connect_ports: tuple[int, ...]
    bind_ports: tuple[int, ...]
    scoped: tuple[str, ...]
    not_enforced: tuple[str, ...]


class Confinement(BaseModel):
    """A kernel-enforced limit on what a product's whole tree can reach.

    Applied (Linux, Landlock) to the product's process before it executes; inherited by
    every process it starts, including those that call ``setsid`` or double-fork. A
    denied access is the product's ordinary permission error (``EACCES``/``EPERM``).
    Invalid values raise a pydantic ``ValidationError`` naming the field.

    Attributes:
        mode: ``"auto"`` confines where the kernel offers Landlock and otherwise runs
            unconfined, logging a warning once per process; ``"required"`` makes
            :func:`~dsh_subprocess.spawn` raise
            :class:`~dsh_subprocess.ConfinementUnavailableError` before anything starts
            where it is not offered; ``"off"`` runs unconfined without a word.
        read: Absolute paths the tree may read and execute beneath (a file: read and
            execute it). Include :func:`system_read_paths` for a program to start at
            all. A path that does not exist when the product starts is skipped.
        write: Absolute paths the tree may read, write, create, remove and execute
            beneath (never create device nodes). Missing paths are skipped too.
        connect_ports: TCP ports the tree may connect to, on any host. From ABI 4,
            every other TCP connect is refused.
        bind_ports: TCP ports the tree may bind (``0``: an ephemeral port). From ABI 4,
            every other bind is refused.
        restrict_tcp: ``False`` leaves TCP unfiltered (the ports above are then
            ignored).
        pseudo_terminals: Let the tree open pseudo-terminals (``/dev/ptmx`` and
            ``/dev/pts``, with terminal ioctls), for a product that runs commands in a
            pty. Off by default: a rule cannot tell the tree's own ptys from the user's
            other terminals under ``/dev/pts``, which it could then read and write.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ConfinementMode = "auto"
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    connect_ports: tuple[int, ...] = ()
    bind_ports: tuple[int, ...] = ()
    restrict_tcp: bool = True
    pseudo_terminals: bool = False

    @field_validator("read", "write", mode="before")
    @classmethod
    def _coerce_paths(cls, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)):
            raise ValueError("expected a sequence of absolute paths, not a single path")
        if isinstance(value, (list, tuple, set, frozenset)):
            return tuple(
                os.fspath(item) if isinstance(item, os.PathLike) else item for item in value
            )
        return value

    @field_validator("read", "write")
    @classmethod
    def _check_paths(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_check_path(path) for path in paths))

    @field_validator("connect_ports")
    @classmethod
    def _check_connect_ports(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        for port in ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"expected TCP ports from 1 to 65535, got {port}")
        return tuple(dict.fromkeys(ports))

    @field_validator("bind_ports")
    @classmethod
    def _check_bind_ports(cls, ports: tuple[int, ...]) -> tuple[int, ...]:
        for port in ports:
            if not 0 <= port <= 65535:
                raise ValueError(f"expected TCP ports from 0 to 65535, got {port}")
        return tuple(dict.fromkeys(ports))

    def effective(self, abi: int | None = None) -> EffectiveConfinement:
        """What the kernel enforces of this policy (``abi``: default, this kernel's)."""
        version = landlock_abi() if abi is None else abi
        enforced = self.mode != "off" and version > 0
        tcp = enforced and self.restrict_tcp and version >= 4
        not_enforced = ["udp", "pathname_unix_socket"]
        if not tcp:
            not_enforced.insert(0, "tcp")
        scoped = ("abstract_unix_socket", "signal") if enforced and version >= 6 else ()
        if not scoped:
            not_enforced += ["abstract_unix_socket", "signal"]
        if not enforced:
            not_enforced = ["files", *not_enforced]
        return EffectiveConfinement(
            mode=self.mode,
            abi=version,
            enforced=enforced,
            fs_rights=_fs_names(_landlock.handled_fs(version)) if enforced else (),
            read=self.read,
            write=self.write,
            devices=tuple(path for path, _kind in DEVICE_PATHS)
            + (PTY_PATHS if self.pseudo_terminals else ()),
            missing=tuple(p for p in (*self.read, *self.write) if not os.path.exists(p)),
            tcp=tcp,
            connect_ports=self.connect_ports if tcp else (),
            bind_ports=self.bind_ports if tcp else (),
            scoped=scoped,
            not_enforced=tuple(not_enforced),
        )


def kernel_policy(confinement: Confinement, abi: int) -> _landlock.Policy:
    """The plain tuple the guard (or the trampoline) hands to :func:`_landlock.apply`."""
    fs = _landlock.handled_fs(abi)
    net = _landlock.handled_net(abi) if confinement.restrict_tcp else 0
    rules: list[tuple[bytes, int]] = [(os.fsencode(p), _landlock.READ) for p in confinement.read]
    rules += [(os.fsencode(p), _landlock.WRITE) for p in confinement.write]
    for path, kind in DEVICE_PATHS:
        access = _landlock.DEVICE_READ if kind == "read" else _landlock.DEVICE_RW
        rules.append((os.fsencode(path), access))
    if confinement.pseudo_terminals:
        rules += [(os.fsencode(path), _landlock.DEVICE_DIR_RW) for path in PTY_PATHS]
    ports = [(port, _landlock.NET_CONNECT_TCP) for port in confinement.connect_ports]
    ports += [(port, _landlock.NET_BIND_TCP) for port in confinement.bind_ports]
    return (fs, net, _landlock.scoped(abi), rules, ports if net else [])


_warned_unavailable = False
_warned_partial = False


def resolve(confinement: Confinement | None) -> _landlock.Policy | None:
    """The kernel policy a spawn must apply, or ``None`` to run unconfined.

    Where the kernel's ABI is older than 6, what it cannot enforce (TCP ports before 4,
    signal and abstract socket scoping before 6) is logged once per process, in every
    mode: ``required`` asks for Landlock, not for a given ABI.

    Raises:
        ConfinementUnavailableError: ``mode="required"`` and the kernel offers no
            Landlock; nothing was started.
    """
    global _warned_unavailable, _warned_partial
    if confinement is None or confinement.mode == "off":
        return None
    abi = landlock_abi()
    if abi > 0:
        if abi < 6 and not _warned_partial:
            _warned_partial = True
            missing = [n for n in confinement.effective(abi).not_enforced if n != "udp"]
            _log.warning(
                "confinement: Landlock ABI %d here does not enforce: %s", abi, ", ".join(missing)
            )
        return kernel_policy(confinement, abi)
    if confinement.mode == "required":
        raise ConfinementUnavailableError()
    if not _warned_unavailable:
        _warned_unavailable = True
        _log.warning(
            "confinement: the kernel offers no Landlock here (%s); products run unconfined",
            sys.platform,
        )
    return None
