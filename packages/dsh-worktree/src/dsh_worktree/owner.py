"""Who owns a worktree: the lock reason dsh-worktree gives git, and whether its owner lives.

Every worktree dsh-worktree creates is locked by git (``git worktree add --lock
--reason``) while its run is live, with a reason that names the owning host process::

    dsh-worktree host=<hostname> boot=<boot id> pid=<pid> start=<start time> base=<sha> id=<id>

A lock keeps ``git worktree prune`` and ``git worktree remove`` away from it. When the
owning process is gone (killed, or the machine lost power: another boot), the worktree
is *abandoned* and the next isolated run on the repository, or ``dsh worktrees recover``,
commits what it holds and removes it. A worktree owned by another host is never touched.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache
from typing import Final, Literal

import psutil

__all__ = ["REASON_PREFIX", "Owner", "OwnerState", "current_owner", "parse_reason"]

REASON_PREFIX: Final = "dsh-worktree"

OwnerState = Literal["live", "abandoned", "foreign"]
"""``live``: the owner runs; ``abandoned``: it is gone; ``foreign``: another host's."""


@cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return f"{psutil.boot_time():.0f}"


def _start_time(pid: int) -> str | None:
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


@dataclass(frozen=True, slots=True)
class Owner:
    """The process that owns a worktree, and the delegation it created it for."""

    host: str
    boot: str
    pid: int
    start: str
    base: str
    id: str
    continues: bool = False
    """The worktree is on an earlier run's branch (a follow-up): never deleted with it."""

    def reason(self) -> str:
        """The lock reason git stores (one line)."""
        tail = " continues=1" if self.continues else ""
        return (
            f"{REASON_PREFIX} host={self.host} boot={self.boot} pid={self.pid} "
            f"start={self.start} base={self.base} id={self.id}{tail}"
        )

    def state(self) -> OwnerState:
        """Whether the owner process still runs (checked on this host only).

        Pid 0 marks a worktree whose collection failed: abandoned on any host.
        """
        if self.pid == 0:
            return "abandoned"
        if self.host != socket.gethostname():
            return "foreign"
        if self.boot != _boot_id():
            return "abandoned"
        started = _start_time(self.pid)
        return "live" if started is not None and started == self.start else "abandoned"


def current_owner(base: str, run_id: str, *, continues: bool = False) -> Owner:
    """This process as the owner of a new worktree for ``run_id`` starting at ``base``."""
    pid = os.getpid()
    start = _start_time(pid) or "?"
    return Owner(socket.gethostname(), _boot_id(), pid, start, base, run_id, continues)


def parse_reason(reason: str) -> Owner | None:
    """The owner a dsh-worktree lock reason names; ``None`` for any other reason."""
    words = reason.split()
    if not words or words[0] != REASON_PREFIX:
        return None
    fields = dict(word.partition("=")[::2] for word in words[1:])
    try:
        return Owner(
            fields["host"],
            fields["boot"],
            int(fields["pid"]),
            fields["start"],
            fields["base"],
            fields["id"],
            fields.get("continues") == "1",
        )
    except (KeyError, ValueError):
        return None
