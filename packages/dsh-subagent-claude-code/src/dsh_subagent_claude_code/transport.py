"""An SDK ``Transport`` whose CLI process is spawned, observed and torn down by dsh-subprocess.

The SDK's own ``SubprocessCLITransport`` hands the CLI the host's whole environment
(credentials included), shares the host's process group, kills only its direct child
and waits 5 s on close. This transport keeps the SDK's control protocol, message
parsing and argv, and replaces only the process: ``dsh_subprocess.spawn`` with the
credential-scrubbed environment plus the explicit overlay, its own process group,
the host-death guard and whole-tree termination.

``close()`` ends stdin and stops reading; it does not wait for the CLI. Termination is
the run's disposal (:meth:`terminate`), which proves whole-tree exit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any, Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, ProcessError, Transport
from dsh_subprocess import ExitFacts, ManagedProcess, SpawnSpec, StdoutUntilExit, spawn

__all__ = ["EXIT_DRAIN_GRACE", "ManagedCLITransport", "Spawner"]

_log = logging.getLogger("dsh_subagent_claude_code")

Spawner = Callable[..., Awaitable[ManagedProcess]]
"""``dsh_subprocess.spawn`` or a test double with the same signature."""

_MAX_LINE_BYTES: Final = 1024 * 1024
"""The SDK's default message bound (``max_buffer_size``)."""

EXIT_DRAIN_GRACE: Final = 1.0
"""Seconds the stream keeps reading after the CLI exited while stdout stays open.

The CLI's tool processes may run in their own session and inherit its stdout, so EOF
can come long after the CLI is gone (or never). Everything the CLI wrote before it
exited is already in the pipe; this window only has to drain it
(:meth:`dsh_subprocess.ManagedProcess.stdout_until_exit` enforces it).
"""


def _parse_line(line: bytes) -> dict[str, Any] | None:
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        # The SDK skips blank and non-JSON stdout lines (some CLI builds print debug text).
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIJSONDecodeError(text, exc) from exc
    return data if isinstance(data, dict) else None


class ManagedCLITransport(Transport):
    """The CLI over stdio, owned by one :class:`dsh_subprocess.ManagedProcess`.

    Args:
        spec: The spawn specification (argv, cwd, env overlay, grace).
        stderr_observer: Receives every stderr line unchanged (host log forwarding).
        spawner: The spawn function; ``dsh_subprocess.spawn`` in production.
        exit_drain_grace: Seconds stdout may stay open after the CLI exited before the
            stream ends anyway (see :data:`EXIT_DRAIN_GRACE`).
    """

    def __init__(
        self,
        spec: SpawnSpec,
        *,
        stderr_observer: Callable[[str], None] | None = None,
        spawner: Spawner = spawn,
        exit_drain_grace: float = EXIT_DRAIN_GRACE,
    ) -> None:
        self._spec = spec
        self._exit_drain_grace = exit_drain_grace
        self._stderr_observer = stderr_observer
        self._spawner = spawner
        self._process: ManagedProcess | None = None
        self._stdin: ByteSendStream | None = None
        self._stdout: ByteReceiveStream | None = None
        self._ready = False
        self._write_lock = anyio.Lock()

    @property
    def process(self) -> ManagedProcess | None:
        """The managed CLI process once :meth:`connect` succeeded."""
        return self._process

    @property
    def exit_facts(self) -> ExitFacts | None:
        """The CLI's exit facts once it has exited, else ``None``."""
        return None if self._process is None else self._process.exit_facts

    async def connect(self) -> None:
        """Spawn the CLI (idempotent: the provider connects before the SDK does)."""
        if self._process is not None:
            return
        if self._stderr_observer is not None:
            process = await self._spawner(self._spec, stderr_observer=self._stderr_observer)
        else:
            process = await self._spawner(self._spec)
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._ready = True

    async def write(self, data: str) -> None:
        """Write one protocol frame to the CLI's stdin."""
        async with self._write_lock:
            if not self._ready or self._stdin is None:
                raise CLIConnectionError("ProcessTransport is not ready for writing")
            if self.exit_facts is not None:
                raise CLIConnectionError("Cannot write to terminated process")
            try:
                await self._stdin.send(data.encode("utf-8"))
            except Exception as exc:
                self._ready = False
                raise CLIConnectionError("Failed to write to process stdin") from exc

    async def end_input(self) -> None:
        """Close the CLI's stdin (the end of the prompt stream)."""
        async with self._write_lock:
            stdin, self._stdin = self._stdin, None
            if stdin is not None:
                with suppress(Exception):
                    await stdin.aclose()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        """Parsed stdout frames; at the end of the stream, a non-zero or signalled exit raises.

        The stream ends at stdout EOF, or :attr:`exit_drain_grace` seconds after the CLI
        exited while something else (a ``setsid`` tool process) still holds stdout.
        """
        process = self._process
        if process is None or self._stdout is None:
            raise CLIConnectionError("Not connected")
        return _StdoutFrames(process, process.stdout_until_exit(self._exit_drain_grace))

    async def close(self) -> None:
        """End stdin and stop accepting writes; the process is released by :meth:`terminate`."""
        self._ready = False
        await self.end_input()

    async def terminate(self) -> ExitFacts | None:
        """Terminate the whole CLI tree and return once every process of it has exited."""
        process = self._process
        if process is None:
            return None
        self._ready = False
        await self.end_input()
        facts = await process.terminate()
        await process.wait_tree_exit()
        return facts

    def is_ready(self) -> bool:
        """Whether frames can be written."""
        return self._ready


class _StdoutFrames:
    """The parsed frames of one CLI's stdout.

    An explicit iterator rather than an async generator: the SDK's reader task may be
    cancelled between two frames and never close what it iterated, and an abandoned
    async generator is a ``ResourceWarning`` under trio. This object holds no resource
    (the stream belongs to the process, released by :meth:`ManagedCLITransport.terminate`).
    """

    def __init__(self, process: ManagedProcess, stdout: StdoutUntilExit) -> None:
        self._process = process
        self._stdout = stdout
        self._pending = bytearray()
        self._stdout_ended = False
        self._finished = False

    def __aiter__(self) -> _StdoutFrames:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._next()
        except (CLIJSONDecodeError, ProcessError):
            self._finished = True
            raise

    async def _next(self) -> dict[str, Any]:
        while not self._finished:
            if self._stdout_ended:
                self._finished = True
                await self._raise_on_failed_exit()
                break
            data = self._buffered_frame()
            if data is not None:
                return data
            chunk = await self._receive()
            if chunk is not None:
                self._pending += chunk
                continue
            self._stdout_ended = True
            tail, self._pending = bytes(self._pending), bytearray()
            if tail:
                # A tail cut off mid-write is unrecoverable; a complete one is still a frame.
                with suppress(CLIJSONDecodeError):
                    data = _parse_line(tail)
                    if data is not None:
                        return data
        raise StopAsyncIteration

    def _buffered_frame(self) -> dict[str, Any] | None:
        """The next complete frame already read, skipping non-frame lines."""
        while (newline := self._pending.find(b"\n")) >= 0:
            line = bytes(self._pending[:newline])
            del self._pending[: newline + 1]
            if len(line) > _MAX_LINE_BYTES:
                raise CLIJSONDecodeError(
                    "JSON message exceeded maximum buffer size", ValueError("message too large")
                )
            data = _parse_line(line)
            if data is not None:
                return data
        if len(self._pending) > _MAX_LINE_BYTES:
            raise CLIJSONDecodeError(
                "JSON message exceeded maximum buffer size", ValueError("message too large")
            )
        return None

    async def _receive(self) -> bytes | None:
        """The next chunk, or ``None`` at EOF or once the exit's drain window is over."""
        try:
            return await self._stdout.receive()
        except anyio.EndOfStream:
            if self._stdout.ended_by_exit:
                _log.debug("the CLI exited with its stdout still open; ending the stream")
            return None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None

    async def _raise_on_failed_exit(self) -> None:
        facts = await self._process.wait()
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
    import signal

    if name is None:
        return 1
    try:
        return int(signal.Signals[name])
    except KeyError:
        return 1
