"""The host's end of a guard's status pipe: non-blocking reads, one report per line.

A guard writes ``G <pid>`` (its own pid; served guards only), ``P <pid>`` (the product
started) or ``E <errno>`` (it could not be started), then ``X <code>`` or ``S <signum>``
as soon as the product exits. It holds the pipe's only write end, so EOF means the guard
is gone. What the reports mean for a tree is the handle's business
(:class:`~dsh_subprocess.ManagedProcess`); this module only moves and splits bytes.
"""

from __future__ import annotations

import contextlib
import os

import anyio

from ._fdstream import close_quietly

__all__ = ["StatusPipe"]


class StatusPipe:
    """The read end of one status pipe (non-blocking), or nothing for an unguarded product."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._buf = b""
        self._eof = fd is None

    @property
    def fd(self) -> int | None:
        """The fd to wait on while reports may still come, else ``None``."""
        return None if self._eof else self._fd

    @property
    def eof(self) -> bool:
        """Whether the guard has closed its end (or there never was a pipe)."""
        return self._eof

    def read(self) -> list[tuple[str, int]]:
        """Consume what is readable now; return the complete reports as (kind, number).

        A line that is not ``<kind> <integer>`` is skipped.
        """
        fd = self._fd
        if fd is None or self._eof:
            return []
        while True:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        reports = []
        for line in lines:
            kind, _, value = line.decode("ascii", "replace").partition(" ")
            try:
                reports.append((kind, int(value)))
            except ValueError:
                continue
        return reports

    def close(self) -> None:
        """Stop reading: later reads return nothing, and the fd is closed."""
        self._eof = True
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Wakes a task of this loop waiting on it (``wait()`` while another terminates).
        with contextlib.suppress(RuntimeError):
            anyio.notify_closing(fd)
        close_quietly(fd)
