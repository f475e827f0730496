"""Run a command the way an ordinary user's process runs: this uid, no capabilities.

The host-environment tests (``docs/security.md``, "The host's environment") need the
view of a product running as the same user as its host. Root's ``CAP_SYS_PTRACE``
bypasses the kernel's "not dumpable" check, and a process without capabilities may not
read one that has more (the kernel's commoncap rule), so both the host and the product
side must run without any: as root, each command is started through util-linux
``setpriv`` with an empty bounding set and no inheritable capabilities (the capabilities
root would regain on ``execve`` come from the bounding set, so none come back); a
process that already has no effective capability runs the command as it is. A root
machine without ``setpriv`` fails the test with that reason: never a silent pass.

uid 0 without capabilities is an ordinary user's view of ``/proc`` for everything these
tests read: the entries the kernel guards with its ptrace check (``environ``, ``mem``,
``maps``, ptrace attach) are refused for a not-dumpable process of the same uid either
way, and the world-readable ones (``cmdline``, ``stat``) stay readable.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Final

__all__ = ["DROP_CAPABILITIES", "effective_capabilities", "unprivileged"]

DROP_CAPABILITIES: Final = ("--bounding-set=-all", "--inh-caps=-all", "--")
"""``setpriv`` arguments that start the command with no capability, now or after exec."""


def effective_capabilities(pid: int | str = "self") -> int:
    """The ``CapEff`` mask of ``pid`` (``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    raise RuntimeError(f"/proc/{pid}/status has no CapEff line")


def unprivileged(argv: Sequence[str]) -> list[str]:
    """``argv`` prefixed so that it runs with no capability (see the module doc).

    Raises:
        RuntimeError: This process has capabilities and ``setpriv`` is not installed.
    """
    if effective_capabilities() == 0:
        return list(argv)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError(
            "this process has capabilities (root?) and util-linux setpriv is missing: "
            "the product side cannot be run as an ordinary user's process"
        )
    return [setpriv, *DROP_CAPABILITIES, *argv]
