"""``RunStatus``: a run's activity, tokens and clock folded from ``run_task``'s events."""

from __future__ import annotations

from dsh_profiles.run import RunNotice, RunPublished, RunSettled, RunStarting
from dsh_profiles.run_status import FIELD_LIMIT, RunStatus, activity, clean_field
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
from hypothesis import given
from hypothesis import strategies as st


def test_activities_people_see() -> None:
    assert activity(TurnStarted()) == "turn started"
    assert activity(AssistantText(text="x", delta=True)) == "writing"
    assert activity(ToolStarted(tool_kind="command", name="Bash")) == "running Bash"
    assert activity(ToolFinished(tool_kind="command", name="Bash")) == "finished Bash"
    assert activity(FileChanged(path="docs/a.md")) == "editing docs/a.md"
    assert activity(PlanUpdated(steps=())) == "planning (0 steps)"
    assert activity(UsageUpdated(usage=Usage(input_tokens=1))) is None  # tokens, not activity


def test_the_command_text_is_never_an_activity() -> None:
    event = ToolStarted(tool_kind="command", name="Bash", command="echo SECRET-CMD")
    assert activity(event) == "running Bash"


def test_the_status_follows_the_run_and_freezes_its_clock_at_the_end() -> None:
    status = RunStatus()
    assert (status.activity, status.usage, status.settled) == ("starting", None, False)
    status.apply(RunStarting())
    status.apply(RunNotice("a line"))  # changes nothing
    assert status.activity == "starting"
    status.apply(RunPublished())
    assert status.activity == "waiting for the product"
    status.apply(ToolStarted(tool_kind="command", name="Bash"))
    status.apply(UsageUpdated(usage=Usage(input_tokens=5)))
    assert status.activity == "running Bash"  # usage is not an activity
    assert status.usage == Usage(input_tokens=5)
    status.apply(RunSettled("completed"))
    frozen = status.elapsed
    assert status.settled
    assert status.activity == "completed"
    status.apply(RunSettled("error"))  # the first end keeps its time
    assert status.elapsed == frozen


def test_a_field_is_cleaned_and_cut() -> None:
    assert clean_field("a\nb\x1b[31m") == "a b [31m"
    assert clean_field("\n") == "?"
    long = clean_field("x" * 500)
    assert len(long) == FIELD_LIMIT
    assert long.endswith("…")


@given(name=st.text(), path=st.text(), kind=st.text())
def test_product_text_never_breaks_an_activity_line(name: str, path: str, kind: str) -> None:
    events: list[ProgressEvent] = [
        ToolStarted(tool_kind=kind, name=name),
        ToolFinished(tool_kind=kind, name=name, ok=True),
        FileChanged(path=path),
    ]
    for event in events:
        shown = activity(event) or ""
        assert shown.isprintable()  # no newline, carriage return or escape sequence
        assert len(shown) <= len("finished ") + FIELD_LIMIT
