"""A scripted job producer for tests of job consumers (tools, notices, hosts).

:class:`ScriptedProducer` follows the producer contract exactly: ``cancel`` is
synchronous and idempotent, ``done`` resolves once with the first outcome and never
raises (unless told to, to exercise the contract-violation path).
"""

from __future__ import annotations

import anyio

from dsh_tool_jobs.model import JobHooks, JobOutcome, TerminalStatus

__all__ = ["ScriptedProducer"]


class ScriptedProducer:
    """A job whose end the test decides.

    Args:
        cancel_settles: Status the job settles with when cancelled, or ``None`` to keep
            running after a cancel (a producer that is slow to stop).
        cancel_raises: Exception ``cancel`` raises (after recording the call).
        done_raises: Exception ``done`` raises instead of returning an outcome.
        stream: Make it a stream job whose deltas come from :meth:`emit`.
    """

    def __init__(
        self,
        *,
        cancel_settles: TerminalStatus | None = "killed",
        cancel_raises: Exception | None = None,
        done_raises: Exception | None = None,
        stream: bool = False,
    ) -> None:
        self.cancel_settles = cancel_settles
        self.cancel_raises = cancel_raises
        self.done_raises = done_raises
        self.stream = stream
        self.cancels: list[str | None] = []
        self.runs = 0
        self.done_returned = False
        self._outcome: JobOutcome | None = None
        self._event = anyio.Event()
        self._pending = ""

    def run(self) -> JobHooks:
        """The ``JobStart.run`` callable."""
        self.runs += 1
        return JobHooks(
            cancel=self.cancel,
            done=self._done(),
            read_output=self._read if self.stream else None,
        )

    def cancel(self, reason: str | None) -> None:
        """Record the cancel; raise or settle as configured."""
        self.cancels.append(reason)
        if self.cancel_raises is not None:
            raise self.cancel_raises
        if self.cancel_settles is not None:
            self.finish(JobOutcome(status=self.cancel_settles))

    def finish(self, outcome: JobOutcome) -> None:
        """Resolve ``done`` with ``outcome`` (the first call wins)."""
        if self._outcome is None:
            self._outcome = outcome
            self._event.set()

    def emit(self, text: str) -> None:
        """Append stream output for the next read."""
        self._pending += text

    def _read(self) -> str:
        text, self._pending = self._pending, ""
        return text

    async def _done(self) -> JobOutcome:
        await self._event.wait()
        if self.done_raises is not None:
            raise self.done_raises
        assert self._outcome is not None
        self.done_returned = True
        return self._outcome
