"""The SDK ``Transport`` over a CLI the provider runtime has already spawned.

The SDK's own ``SubprocessCLITransport`` hands the CLI the host's whole environment
(credentials included), shares the host's process group, kills only its direct child
and waits 5 s on close. This transport keeps the SDK's control protocol and message
parsing and replaces only the process: the CLI is the run's
:class:`~dsh_subagent.ProductChild`, spawned by the runtime through dsh-subprocess (the
credential-scrubbed environment plus the explicit overlay, its own process group, the
host-death guard) and torn down by it to whole-tree exit.

So ``connect()`` spawns nothing, and ``close()`` only ends stdin: it never waits for the
CLI (the SDK calls it inside a shield and requires it to bound its own awaits).

Frames are read through the runtime's bounded line reader (``child.lines``). Its
stream ends at stdout EOF, or ``dispose_grace`` seconds after the CLI exited while
something else (a ``setsid`` tool process) still holds stdout. The malformed-line
policy is the SDK's own: a line that does not start with ``{`` is skipped (some CLI
builds print debug text), a ``{`` line that is not JSON fails the run.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import anyio
from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, ProcessError, Transport
from dsh_subagent import ProductChild

__all__ = ["ManagedCLITransport"]


def _parse_line(line: bytes) -> dict[str, Any] | None:
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIJSONDecodeError(text, exc) from exc
    return data if isinstance(data, dict) else None


class ManagedCLITransport(Transport):
    """The CLI's stdio for the SDK's ``query()``: one run's :class:`ProductChild`.

    Args:
        child: The run's product child; its process and line reader are the runtime's.
    """

    def __init__(self, child: ProductChild) -> None:
        self._child = child
        self._ready = False
        self._input_ended = False
        self._write_lock = anyio.Lock()

    async def connect(self) -> None:
        """Nothing to start: the runtime spawned the CLI before the run was published."""
        self._ready = not self._input_ended

    async def write(self, data: str) -> None:
        """Write one protocol frame to the CLI's stdin."""
        async with self._write_lock:
            if not self._ready:
                raise CLIConnectionError("ProcessTransport is not ready for writing")
            if self._child.exit_facts is not None:
                raise CLIConnectionError("Cannot write to terminated process")
            try:
                await self._child.send(data.encode("utf-8"))
            except Exception as exc:
                self._ready = False
                raise CLIConnectionError("Failed to write to process stdin") from exc

    async def end_input(self) -> None:
        """Close the CLI's stdin (the end of the prompt stream)."""
        async with self._write_lock:
            self._ready = False
            self._input_ended = True
            await self._child.close_stdin()

    def read_messages(self) -> _Frames:
        """Parsed stdout frames; at the end of the stream a failed exit raises ``ProcessError``."""
        return _Frames(self._child)

    async def close(self) -> None:
        """End stdin; the process tree is the runtime's to terminate."""
        await self.end_input()

    def is_ready(self) -> bool:
        """Whether frames can be written."""
        return self._ready


class _Frames:
    """The parsed frames of one CLI's stdout.

    An explicit iterator rather than an async generator: the SDK's reader task may be
    cancelled between two frames and never close what it iterated, and an abandoned
    async generator is a ``ResourceWarning`` under trio. This object holds no resource
    (the stream belongs to the child, released by the runtime's teardown).
    """

    def __init__(self, child: ProductChild) -> None:
        self._child = child
        self._finished = False

    def __aiter__(self) -> _Frames:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._finished:
            raise StopAsyncIteration
        try:
            frame = await self._next_frame()
        except Exception:
            self._finished = True
            raise
        if frame is None:
            self._finished = True
            await self._raise_on_failed_exit()
            raise StopAsyncIteration
        return frame

    async def _next_frame(self) -> dict[str, Any] | None:
        lines = self._child.lines
        while True:
            try:
                line = await lines.receive()
            except anyio.EndOfStream:
                return None
            if lines.eof:
                # An unterminated tail: one cut off mid-write is unrecoverable (the exit
                # status tells what happened), a complete one is still a frame.
                try:
                    return _parse_line(line)
                except CLIJSONDecodeError:
                    return None
            frame = _parse_line(line)
            if frame is not None:
                return frame

    async def _raise_on_failed_exit(self) -> None:
        # Closing stdout is not exiting: wait for the exit status, as the SDK does.
        facts = await self._child.process.wait()
        if facts.exit_code != 0:
            # Same shape as the SDK transport: the SDK turns it into ResultError after
            # an error result. The exit code is -<signum> for a signalled exit, as there.
            code = facts.exit_code
            if code is None:
                code = -_signal_number(facts.signal)
            raise ProcessError(
                "Command failed", exit_code=code, stderr="Check stderr output for details"
            )


def _signal_number(name: str | None) -> int:
    if name is None:
        return 1
    try:
        return int(signal.Signals[name])
    except KeyError:
        return 1
