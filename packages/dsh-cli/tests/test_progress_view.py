"""The progress formats of ``dsh run``: the plain lines, the live activity, the figures."""

from __future__ import annotations

import io

from dsh_cli.progress_view import PlainView, format_elapsed, format_tokens, plain_details
from dsh_profiles.run_status import FIELD_LIMIT
from dsh_subagent import (
    AssistantText,
    FileChanged,
    PlanStep,
    PlanUpdated,
    ProgressEvent,
    ToolFinished,
    ToolStarted,
    TurnStarted,
    Usage,
    UsageUpdated,
)
from hypothesis import given
from hypothesis import strategies as st


def test_every_event_kind_has_its_documented_plain_form() -> None:
    cases: list[tuple[ProgressEvent, str]] = [
        (TurnStarted(), "turn-started"),
        (AssistantText(text="abc", delta=True), "assistant-text streaming"),
        (AssistantText(text="hello"), "assistant-text 5 chars"),
        (
            ToolStarted(tool_kind="command", name="Bash", command="rm -rf x"),
            "tool-started command Bash",
        ),
        (ToolFinished(tool_kind="command", name="Bash", ok=True), "tool-finished command Bash ok"),
        (ToolFinished(tool_kind="mcp", name="x", ok=False), "tool-finished mcp x failed"),
        (ToolFinished(tool_kind="other", name="y"), "tool-finished other y"),
        (FileChanged(path="src/app.py"), "file-changed src/app.py"),
        (PlanUpdated(steps=(PlanStep(text="a"), PlanStep(text="b"))), "plan-updated 2 steps"),
        (
            UsageUpdated(usage=Usage(input_tokens=10, cached_input_tokens=4, cost_usd=0.5)),
            "usage-updated input=10 cached_input=4 output=- reasoning=- cost_usd=0.5",
        ),
    ]
    for event, shown in cases:
        assert plain_details(event) == shown


def test_the_command_text_is_never_shown() -> None:
    # dsh does not opt in to command text, and even an event carrying one shows the name.
    event = ToolStarted(tool_kind="command", name="Bash", command="echo SECRET-CMD")
    assert "SECRET-CMD" not in plain_details(event)


def test_token_and_time_figures() -> None:
    assert format_tokens(None) == "no token count yet"
    assert format_tokens(Usage(input_tokens=1200, output_tokens=34)) == (
        "1,234 tokens (1,200 in, 34 out)"
    )
    assert format_tokens(Usage(output_tokens=7)) == "tokens: 7 out"
    assert format_tokens(Usage()) == "tokens not reported"
    assert format_tokens(Usage(input_tokens=1, output_tokens=1, cost_usd=0.01234)) == (
        "2 tokens (1 in, 1 out), $0.0123"
    )
    assert format_elapsed(3.04) == "3.0s"
    assert format_elapsed(65.9) == "1m 05s"
    assert format_elapsed(3723) == "1h 02m 03s"


def test_a_streak_of_streamed_text_is_one_plain_line() -> None:
    err = io.StringIO()
    view = PlainView("codex", err)
    events: list[ProgressEvent] = [
        TurnStarted(),
        AssistantText(text="a", delta=True),
        AssistantText(text="b", delta=True),
        ToolStarted(tool_kind="command", name="Bash"),
        AssistantText(text="c", delta=True),
        AssistantText(text="whole message"),
        AssistantText(text="d", delta=True),
    ]
    for event in events:
        view.event(event)
    kinds = [line.split("] ", 1)[1] for line in err.getvalue().splitlines()]
    assert kinds == [
        "turn-started",
        "assistant-text streaming",
        "tool-started command Bash",
        "assistant-text streaming",
        "assistant-text 13 chars",
        "assistant-text streaming",
    ]
    assert view.activity == "writing"


@given(name=st.text(), path=st.text(), kind=st.text())
def test_product_text_never_breaks_the_one_line_format(name: str, path: str, kind: str) -> None:
    events: list[ProgressEvent] = [
        ToolStarted(tool_kind=kind, name=name),
        ToolFinished(tool_kind=kind, name=name, ok=True),
        FileChanged(path=path),
    ]
    for event in events:
        shown = plain_details(event)
        assert shown.isprintable()  # no newline, carriage return or escape sequence
        assert len(shown) <= len("tool-finished  ok") + 2 * FIELD_LIMIT
