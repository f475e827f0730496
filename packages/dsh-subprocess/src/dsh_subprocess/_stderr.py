"""A daemon thread that drains a child's stderr pipe and forwards it line by line.

Without an observer of the caller's, each line goes to Python logging (the
``dsh_subprocess.stderr`` logger, level INFO, the line itself as the message), never to
the host's own stderr: what reaches a terminal or a log file is the host's choice.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import threading
from collections.abc import Callable

StderrObserver = Callable[[str], None]

STDERR_LOGGER = "dsh_subprocess.stderr"

_CHUNK = 65536
_MAX_LINE_CHARS = 1 << 20  # a newline-free flood is forwarded in pieces, never hoarded
_log = logging.getLogger(STDERR_LOGGER)


def log_stderr_line(line: str) -> None:
    """The default observer: log the line unchanged at INFO on ``dsh_subprocess.stderr``.

    The record's message is the line itself (no arguments, so a ``%`` in it is never
    interpreted); nothing is parsed or added.
    """
    _log.info(line)


def start_drain(fd: int | None, observer: StderrObserver | None) -> StderrDrain | None:
    """Start draining the read end ``fd`` of a stderr pipe, if there is one.

    ``observer`` defaults to :func:`log_stderr_line`.
    """
    if fd is None:
        return None
    drain = StderrDrain(fd, observer or log_stderr_line)
    drain.start()
    return drain


def _discard(line: str) -> None:
    pass


class StderrDrain:
    """Owns the read end of a stderr pipe: reads it to EOF, then closes it."""

    def __init__(self, fd: int, observer: StderrObserver) -> None:
        self._fd = fd
        self._observer = observer
        self._thread = threading.Thread(
            target=self._run, name=f"dsh-subprocess-stderr-{fd}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def done(self) -> bool:
        """``True`` once EOF was reached and the fd closed."""
        return not self._thread.is_alive()

    def detach(self) -> None:
        """Stop forwarding; the pipe keeps being drained so the writer never blocks."""
        self._observer = _discard

    def _emit(self, line: str) -> None:
        with contextlib.suppress(Exception):  # an observer failure must not stop the drain
            self._observer(line)

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        try:
            while True:
                try:
                    chunk = os.read(self._fd, _CHUNK)
                except OSError:
                    break
                if not chunk:
                    break
                *lines, pending = (pending + decoder.decode(chunk)).split("\n")
                for line in lines:
                    self._emit(line)
                if len(pending) >= _MAX_LINE_CHARS:
                    self._emit(pending)
                    pending = ""
            pending += decoder.decode(b"", final=True)
            if pending:
                self._emit(pending)
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)
