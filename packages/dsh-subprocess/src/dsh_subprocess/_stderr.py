"""A daemon thread that drains a child's stderr pipe and forwards it line by line."""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import threading
from collections.abc import Callable

StderrObserver = Callable[[str], None]

_CHUNK = 65536
_MAX_LINE_CHARS = 1 << 20  # a newline-free flood is forwarded in pieces, never hoarded


def forward_to_host_stderr(line: str) -> None:
    """The default observer: write the line, newline restored, to the host's ``sys.stderr``."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(Exception):  # host stderr is an observation sink, not an authority
        stream.write(line + "\n")
        stream.flush()


def start_drain(fd: int | None, observer: StderrObserver | None) -> StderrDrain | None:
    """Start draining the read end ``fd`` of a stderr pipe, if there is one.

    ``observer`` defaults to :func:`forward_to_host_stderr`.
    """
    if fd is None:
        return None
    drain = StderrDrain(fd, observer or forward_to_host_stderr)
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
