"""What ``dsh run`` shows on stderr while a run works: live on a terminal, plain otherwise.

Progress is what the product said (see the progress events of ``dsh_subagent``);
nothing here is synthesised, and nothing here ever reaches stdout, which carries only
the answer (or the ``--json`` record).

* **Live** (stderr is a terminal): one status line redrawn in place with ``rich``: a
  spinner, the instance, the elapsed time, the current activity (``starting``,
  ``turn started``, ``writing``, ``running Bash``, ``editing src/app.py``, ...) and the
  tokens so far. It is redrawn when the activity or the tokens change and four times a
  second for the clock; the last frame stays on screen with the outcome. ``dsh``'s own
  lines and log records print above it.
* **Plain** (stderr is not a terminal): one line per progress event,
  ``dsh: <instance>: [<elapsed>s] <kind>[ <details>]`` (format in :func:`plain_details`);
  a streak of streamed assistant-text pieces is one line.

Product text (tool names, paths) is shown with control characters replaced and cut to
:data:`FIELD_LIMIT` characters, so one event is always one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable
from typing import Final, TextIO, cast

from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from rich.console import Console
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

__all__ = [
    "FIELD_LIMIT",
    "LiveView",
    "PlainView",
    "RunView",
    "activity",
    "format_elapsed",
    "format_tokens",
    "plain_details",
]

FIELD_LIMIT: Final = 120
"""Characters of one product-given field (a tool name, a path) shown in one line."""


def _field(text: str) -> str:
    """``text`` on one line: control characters become spaces, cut to the limit."""
    cleaned = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(cleaned) > FIELD_LIMIT:
        cleaned = cleaned[: FIELD_LIMIT - 1] + "…"
    return cleaned or "?"


def format_elapsed(seconds: float) -> str:
    """``12.3s`` under a minute, ``4m 05s`` and ``1h 02m 03s`` beyond."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s"


def format_tokens(usage: Usage | None) -> str:
    """Tokens so far as people read them, e.g. ``1,234 tokens (1,200 in, 34 out)``."""
    if usage is None:
        return "no token count yet"
    parts = []
    if usage.input_tokens is not None:
        parts.append(f"{usage.input_tokens:,} in")
    if usage.output_tokens is not None:
        parts.append(f"{usage.output_tokens:,} out")
    total = usage.total_tokens
    if total is not None:
        text = f"{total:,} tokens ({', '.join(parts)})"
    elif parts:
        text = "tokens: " + ", ".join(parts)
    else:
        text = "tokens not reported"
    if usage.cost_usd is not None:
        text += f", ${usage.cost_usd:.4f}"
    return text


def activity(event: ProgressEvent) -> str | None:
    """The current activity an event announces; ``None`` when it announces none (usage)."""
    if isinstance(event, TurnStarted):
        return "turn started"
    if isinstance(event, AssistantText):
        return "writing"
    if isinstance(event, ToolStarted):
        return f"running {_field(event.name)}"
    if isinstance(event, ToolFinished):
        return f"finished {_field(event.name)}"
    if isinstance(event, FileChanged):
        return f"editing {_field(event.path)}"
    if isinstance(event, PlanUpdated):
        return f"planning ({len(event.steps)} steps)"
    return None


def _count(value: int | float | None) -> str:
    return "-" if value is None else str(value)


def plain_details(event: ProgressEvent) -> str:
    """The ``<kind>[ <details>]`` part of a plain progress line.

    ======================  =================================================
    event                   shown as
    ======================  =================================================
    turn started            ``turn-started``
    assistant text          ``assistant-text streaming`` (the first piece of a
                            streak) or ``assistant-text <N> chars``
    tool started            ``tool-started <tool_kind> <name>``
    tool finished           ``tool-finished <tool_kind> <name>[ ok|failed]``
    file changed            ``file-changed <path>``
    plan updated            ``plan-updated <N> steps``
    usage updated           ``usage-updated input=<n> cached_input=<n>
                            output=<n> reasoning=<n> cost_usd=<x>`` (``-``:
                            not reported)
    ======================  =================================================
    """
    if isinstance(event, TurnStarted):
        return "turn-started"
    if isinstance(event, AssistantText):
        return "assistant-text " + ("streaming" if event.delta else f"{len(event.text)} chars")
    if isinstance(event, ToolStarted):
        return f"tool-started {_field(event.tool_kind)} {_field(event.name)}"
    if isinstance(event, ToolFinished):
        ok = "" if event.ok is None else (" ok" if event.ok else " failed")
        return f"tool-finished {_field(event.tool_kind)} {_field(event.name)}{ok}"
    if isinstance(event, FileChanged):
        return f"file-changed {_field(event.path)}"
    if isinstance(event, PlanUpdated):
        return f"plan-updated {len(event.steps)} steps"
    usage = event.usage
    return (
        f"usage-updated input={_count(usage.input_tokens)} "
        f"cached_input={_count(usage.cached_input_tokens)} "
        f"output={_count(usage.output_tokens)} reasoning={_count(usage.reasoning_tokens)} "
        f"cost_usd={_count(usage.cost_usd)}"
    )


class RunView:
    """The plain view's base: tracks elapsed time, activity and tokens of one run.

    Args:
        instance: The instance name shown in every line.
        err: The command's stderr.
    """

    def __init__(self, instance: str, err: TextIO) -> None:
        self.instance = instance
        self.err = err
        self._began = time.monotonic()
        self._settled_at: float | None = None
        self.activity = "starting"
        self.usage: Usage | None = None

    @property
    def elapsed(self) -> float:
        """Seconds since :meth:`begin` (frozen once the run settled)."""
        end = self._settled_at if self._settled_at is not None else time.monotonic()
        return end - self._began

    def begin(self) -> None:
        """The run is being started now: the clock starts."""
        self._began = time.monotonic()

    def say(self, line: str) -> None:
        """One of ``dsh``'s own lines, on stderr."""
        print(line, file=self.err, flush=True)

    def published(self) -> None:
        """The run was published: the product is working on the task."""
        self.activity = "waiting for the product"

    def event(self, event: ProgressEvent) -> None:
        """Record one progress event."""
        now = activity(event)
        if now is not None:
            self.activity = now
        if isinstance(event, UsageUpdated):
            self.usage = event.usage

    async def follow(self, progress: AsyncIterable[ProgressEvent]) -> None:
        """Show every event of ``progress`` until it ends (the run settled)."""
        async for event in progress:
            self.event(event)

    def settled(self, outcome: str) -> None:
        """The run ended (``completed``, ``error``, ``could not start``, ...)."""
        if self._settled_at is None:
            self._settled_at = time.monotonic()
        self.activity = outcome

    def __enter__(self) -> RunView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class PlainView(RunView):
    """One line per progress event (see :func:`plain_details`)."""

    def __init__(self, instance: str, err: TextIO) -> None:
        super().__init__(instance, err)
        self._streaming = False

    def event(self, event: ProgressEvent) -> None:
        super().event(event)
        streamed = isinstance(event, AssistantText) and event.delta
        if streamed and self._streaming:
            return  # the rest of a streak: its first piece was shown
        self._streaming = streamed
        self.say(f"dsh: {self.instance}: [{self.elapsed:.1f}s] {plain_details(event)}")


class LiveView(RunView):
    """One status line redrawn in place (``rich``), for a terminal.

    While it is up, log records of ``log_handler`` (the command's logging handler on the
    same stderr) print above the status line instead of through it.
    """

    def __init__(
        self, instance: str, err: TextIO, log_handler: logging.StreamHandler[TextIO] | None = None
    ) -> None:
        super().__init__(instance, err)
        self._console = Console(file=err, highlight=False)
        self._spinner = Spinner("dots")
        self._live: Live | None = None
        self._log_handler = log_handler
        self._saved_stream: TextIO | None = None
        self._shown: tuple[str, str] | None = None

    def _line(self) -> Text:
        line = Text()
        line.append(self.instance, style="bold")
        line.append(f"  {format_elapsed(self.elapsed)}  ", style="cyan")
        line.append(self.activity)
        line.append(f"  · {format_tokens(self.usage)}", style="dim")
        return line

    def _render(self) -> Spinner | Text:
        if self._settled_at is not None:
            return self._line()
        self._spinner.update(text=self._line())
        return self._spinner

    def __enter__(self) -> LiveView:
        self._live = Live(
            console=self._console,
            get_renderable=self._render,
            refresh_per_second=4,
            redirect_stdout=False,  # stdout carries the answer only, never the display
            redirect_stderr=True,
        )
        self._live.start(refresh=True)
        if self._log_handler is not None:
            # FileProxy is rich's line-buffered stream that prints above the live display.
            proxy = cast(TextIO, FileProxy(self._console, self.err))
            self._saved_stream = self._log_handler.setStream(proxy)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._log_handler is not None and self._saved_stream is not None:
            self._log_handler.setStream(self._saved_stream)
            self._saved_stream = None
        if self._live is not None:
            self._live.stop()
            self._live = None

    def say(self, line: str) -> None:
        if self._live is None:
            super().say(line)
            return
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _refresh_if_changed(self) -> None:
        shown = (self.activity, format_tokens(self.usage))
        if shown != self._shown and self._live is not None:
            self._shown = shown
            self._live.refresh()

    def published(self) -> None:
        super().published()
        self._refresh_if_changed()

    def event(self, event: ProgressEvent) -> None:
        super().event(event)
        self._refresh_if_changed()

    def settled(self, outcome: str) -> None:
        super().settled(outcome)
        self._refresh_if_changed()
