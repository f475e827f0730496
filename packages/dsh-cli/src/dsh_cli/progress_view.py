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

What a run is doing, its tokens and its clock are the library's status model
(:class:`dsh_profiles.run_status.RunStatus`); this module draws it. Product text (tool
names, paths) is shown with control characters replaced and cut to
:data:`~dsh_profiles.run_status.FIELD_LIMIT` characters
(:func:`~dsh_profiles.run_status.clean_field`), so one event is always one line.
"""

from __future__ import annotations

import logging
from typing import TextIO, cast

from dsh_profiles.run import RunEvent, RunNotice, RunPublished, RunSettled, RunStarting
from dsh_profiles.run_status import RunStatus
from dsh_profiles.run_status import clean_field as _field
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
)
from rich.console import Console
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

__all__ = [
    "LiveView",
    "PlainView",
    "RunView",
    "format_elapsed",
    "format_tokens",
    "plain_details",
]


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
    """The plain view's base: the run's status, and ``dsh``'s own lines.

    Args:
        instance: The instance name shown in every line.
        err: The command's stderr.
    """

    def __init__(self, instance: str, err: TextIO) -> None:
        self.instance = instance
        self.err = err
        self.status = RunStatus()

    @property
    def elapsed(self) -> float:
        """Seconds since the product was started (frozen once the run settled)."""
        return self.status.elapsed

    @property
    def activity(self) -> str:
        """What the run is doing now, or its outcome."""
        return self.status.activity

    def say(self, line: str) -> None:
        """One of ``dsh``'s own lines, on stderr."""
        print(line, file=self.err, flush=True)

    def event(self, event: RunEvent) -> None:
        """Show one event of the run (a notice is one of ``dsh``'s own lines)."""
        if isinstance(event, RunNotice):
            self.say(f"dsh: {event.text}")
        else:
            self.status.apply(event)

    def __enter__(self) -> RunView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class PlainView(RunView):
    """One line per progress event (see :func:`plain_details`)."""

    def __init__(self, instance: str, err: TextIO) -> None:
        super().__init__(instance, err)
        self._streaming = False

    def event(self, event: RunEvent) -> None:
        super().event(event)
        if isinstance(event, RunNotice | RunStarting | RunPublished | RunSettled):
            return  # not progress: no line of its own
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
        line.append(f"  · {format_tokens(self.status.usage)}", style="dim")
        return line

    def _render(self) -> Spinner | Text:
        if self.status.settled:
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
        shown = (self.activity, format_tokens(self.status.usage))
        if shown != self._shown and self._live is not None:
            self._shown = shown
            self._live.refresh()

    def event(self, event: RunEvent) -> None:
        super().event(event)
        self._refresh_if_changed()
