"""``run_task``: one task through a composition as ``dsh run`` runs it, against scripted
providers (no product): checks before start, outcomes, events, cancellation, signals."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from dsh_profiles import StaticDiscovery, UsageError, compose, parse_profile
from dsh_profiles.loader import Composition
from dsh_profiles.run import (
    EXIT_CODES,
    RunEvent,
    RunFailure,
    RunNotice,
    RunPublished,
    RunSettled,
    RunStarting,
    exit_code_for,
    json_record,
    one_line,
    parse_resume,
    run_task,
)
from dsh_subagent import (
    AssistantText,
    Budget,
    CancelController,
    ConfinementSetting,
    ContinuationHandle,
    ProductStartError,
    SubagentError,
    SubagentErrorCode,
    SubagentResult,
    TextBlock,
    Usage,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subprocess import _landlock
from dsh_worktree import Worktree
from pydantic import BaseModel, ConfigDict

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class ScriptConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"
    stop_reason: str = "completed"
    hold: bool = False
    start_fails: bool = False
    result_raises: bool = False
    confinement: ConfinementSetting = ConfinementSetting(mode="off")


class Entry(ScriptedProvider):
    """A ScriptedProvider constructed the way the Loader constructs providers."""

    Config: ClassVar[type[ScriptConfig]] = ScriptConfig
    made: ClassVar[list[Entry]] = []

    def __init__(self, config: ScriptConfig) -> None:
        start_error = ProductStartError("Product subagent failure (product: P; stage: spawn)")
        start_error.__cause__ = FileNotFoundError("/secret/path")
        script = Script(
            output=(TextBlock(text="the answer"),),
            stop_reason=config.stop_reason,
            partial=(TextBlock(text="partial"),),
            hold_result=anyio.Event() if config.hold else None,
            start_error=start_error if config.start_fails else None,
            result_error=OSError("/secret/path/result") if config.result_raises else None,
        )
        super().__init__(config.provider_name, [script])
        self.config = config  # where the confinement checks read the instance's mode
        Entry.made.append(self)


def _composition(config: dict[str, Any] | None = None, background: str = "one-shot") -> Composition:
    Entry.made.clear()
    raw = {
        "providers": [{"type": "scripted", "provider_name": "worker", "config": config or {}}],
        "tools": [{"name": "subagent_worker", "provider": "worker", "background_mode": background}],
        "jobs": {},
    }
    discovery = StaticDiscovery({"scripted": [Entry]})
    return compose(parse_profile(raw, "p.toml"), source="p.toml", discovery=discovery)


def test_exit_codes_are_a_fixed_table() -> None:
    assert EXIT_CODES == {"completed": 0, "error": 1, "max-tokens": 3, "refusal": 4, "aborted": 130}
    assert exit_code_for("something-new") == 1


def test_one_line_keeps_only_safe_messages() -> None:
    assert one_line(SubagentError(SubagentErrorCode.INVALID_REQUEST, "bad field")) == "bad field"
    assert one_line(OSError("/secret")) == "internal error (OSError)"
    inner = SubagentError(SubagentErrorCode.INVALID_REQUEST, "a")
    group = ExceptionGroup("g", [inner, ValueError("/x")])
    assert one_line(group) == "a; internal error (ValueError)"


def test_json_record_carries_the_result_and_structured_only_when_typed() -> None:
    result = SubagentResult(
        output=(TextBlock(text="hi"),),
        stop_reason="completed",
        usage=Usage(input_tokens=3),
        structured={"ok": True},
    )
    record = json_record(result, 1.23456)
    assert record["answer"] == "hi"
    assert record["elapsed_seconds"] == 1.235
    assert record["changes"] is None
    assert record["continuation"] is None
    assert isinstance(record["usage"], dict)
    assert record["usage"]["input_tokens"] == 3
    assert "structured" not in record
    assert json_record(result, 0, typed=True)["structured"] == {"ok": True}


def test_parse_resume_names_what_was_wrong() -> None:
    assert parse_resume(None) is None
    with pytest.raises(UsageError, match=r"^--resume: "):
        parse_resume("not-a-handle", "--resume")
    handle = ContinuationHandle(provider="worker", product="p", session="s1")
    assert parse_resume(handle.dumps()) == handle


async def test_a_foreground_run_reports_its_events_in_order_and_its_outcome() -> None:
    here = str(await anyio.Path(".").absolute())
    events: list[RunEvent] = []
    outcome = await run_task(
        _composition(), target="subagent_worker", task="Do it.", on_event=events.append
    )
    assert outcome.result is not None
    assert outcome.result.text == "the answer"
    assert (outcome.target, outcome.exit_code, outcome.failure) == ("worker", 0, None)
    assert outcome.elapsed > 0
    kinds = [type(event) for event in events if not isinstance(event, AssistantText)]
    assert kinds == [RunStarting, RunPublished, RunSettled]
    assert events[-1] == RunSettled("completed")
    (provider,) = Entry.made
    assert provider.records[0].teardowns == 1
    assert provider.records[0].request.parent.cwd == here


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "  \n"}, "the task is blank"),
        ({"target": "nope"}, "unknown tool or instance 'nope'"),
        ({"cwd": "/nonexistent/dsh"}, "cwd '/nonexistent/dsh' is not an accessible directory"),
        ({"output_schema": {"type": "array"}}, "output_schema: "),
        ({"background": True, "budget": Budget(deadline_seconds=5)}, "foreground runs only"),
        ({"target": "worker", "background": True}, "--background needs a tool"),
        (
            {"resume": ContinuationHandle(provider="w", product="p", session="s", workspace="/w")},
            "the handle continues an isolated run",
        ),
    ],
)
async def test_bad_input_is_one_usage_error_and_starts_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {"target": "subagent_worker", "task": "Do it.", **kwargs}
    composition = _composition()
    with pytest.raises(UsageError, match=message):
        await run_task(composition, **arguments)
    assert Entry.made[0].start_count == 0


async def test_a_task_past_the_products_input_limit_is_a_usage_error_before_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Entry, "max_task_chars", 5, raising=False)
    composition = _composition()
    with pytest.raises(UsageError, match=r"^the task is 6 characters; worker accepts at most 5 "):
        await run_task(composition, target="subagent_worker", task="Do it!")
    assert Entry.made[0].start_count == 0
    outcome = await run_task(composition, target="subagent_worker", task="Do it")  # the limit
    assert outcome.exit_code == 0


async def test_auto_confinement_without_landlock_is_a_notice_and_required_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: 0)
    notices: list[str] = []

    def keep(event: RunEvent) -> None:
        if isinstance(event, RunNotice):
            notices.append(event.text)

    auto = _composition({"confinement": {"mode": "auto"}})
    outcome = await run_task(auto, target="subagent_worker", task="x", on_event=keep)
    assert outcome.exit_code == 0
    assert notices == [
        "this kernel offers no Landlock: providers with confinement 'auto' run unconfined "
        "(see docs/security.md)"
    ]
    required = _composition({"confinement": {"mode": "required"}})
    with pytest.raises(UsageError, match="confinement is required"):
        await run_task(required, target="subagent_worker", task="x")
    assert Entry.made[0].start_count == 0


async def test_isolation_is_checked_inside_the_event_loop(tmp_path: Path) -> None:
    # Not a repository: dsh-worktree refuses the cwd before anything starts.
    with pytest.raises(UsageError, match="git"):
        await run_task(
            _composition(),
            target="subagent_worker",
            task="Do it.",
            cwd=str(tmp_path),
            worktree=Worktree(),
        )
    assert Entry.made[0].start_count == 0


async def test_a_start_failure_is_an_outcome_with_the_safe_message_only() -> None:
    events: list[RunEvent] = []
    outcome = await run_task(
        _composition({"start_fails": True}),
        target="subagent_worker",
        task="Do it.",
        on_event=events.append,
    )
    assert outcome.failure == RunFailure(
        "could not start", "Product subagent failure (product: P; stage: spawn)"
    )
    assert outcome.exit_code == 1
    assert events[-1] == RunSettled("could not start")


async def test_a_result_that_raises_is_a_failure_naming_only_the_type() -> None:
    outcome = await run_task(
        _composition({"result_raises": True}), target="worker", task="Do it.", instance=True
    )
    assert outcome.failure == RunFailure("failed", "internal error (OSError)")
    assert Entry.made[0].records[0].teardowns == 1


async def test_the_callers_cancel_settles_the_run_aborted() -> None:
    controller = CancelController()

    def cancel_once_published(event: RunEvent) -> None:
        if isinstance(event, RunPublished):
            controller.cancel("host says stop")

    outcome = await run_task(
        _composition({"hold": True}),
        target="subagent_worker",
        task="Wait.",
        cancel=controller.signal,
        on_event=cancel_once_published,
    )
    assert outcome.result is not None
    assert outcome.result.stop_reason == "aborted"
    assert outcome.exit_code == 130
    assert Entry.made[0].records[0].teardowns == 1


async def test_cancelled_before_the_start_is_its_own_outcome() -> None:
    controller = CancelController()
    controller.cancel("early")
    outcome = await run_task(
        _composition(), target="subagent_worker", task="x", cancel=controller.signal
    )
    assert outcome.cancelled_before_start
    assert outcome.exit_code == 130


async def test_signals_are_left_to_the_host_unless_asked() -> None:
    """Deliberate: a library must not take over the host's SIGINT behind its back, so
    ``run_task`` installs no handler by default (``dsh run`` passes handle_signals)."""
    before = signal.getsignal(signal.SIGINT)
    during: list[object] = []

    def look(event: RunEvent) -> None:
        if isinstance(event, RunPublished):
            during.append(signal.getsignal(signal.SIGINT))

    outcome = await run_task(_composition(), target="subagent_worker", task="x", on_event=look)
    assert outcome.exit_code == 0
    assert during == [before]


async def test_handle_signals_cancels_on_sigint_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    notices: list[str] = []
    during: list[object] = []

    def interrupt_once_published(event: RunEvent) -> None:
        if isinstance(event, RunNotice):
            notices.append(event.text)
        if isinstance(event, RunPublished):
            during.append(signal.getsignal(signal.SIGINT))
            os.kill(os.getpid(), signal.SIGINT)

    outcome = await run_task(
        _composition({"hold": True}),
        target="subagent_worker",
        task="Wait.",
        handle_signals=True,
        on_event=interrupt_once_published,
    )
    assert outcome.result is not None
    assert outcome.result.stop_reason == "aborted"
    assert outcome.exit_code == 130
    assert notices == ["SIGINT: cancelling the run"]
    assert during != [before]  # the watcher was in charge during the run
    assert signal.getsignal(signal.SIGINT) == before
    assert Entry.made[0].records[0].cancel_reasons == ["interrupted (SIGINT)"]


async def test_a_background_run_is_collected_from_its_job() -> None:
    notices: list[str] = []

    def keep(event: RunEvent) -> None:
        if isinstance(event, RunNotice):
            notices.append(event.text)

    outcome = await run_task(
        _composition(), target="subagent_worker", task="Do it.", background=True, on_event=keep
    )
    assert outcome.target == "subagent_worker"
    assert outcome.job is not None
    assert outcome.job.status == "completed"
    assert outcome.job_output == "the answer"
    assert outcome.exit_code == 0
    assert notices == ["started background subagent job subagent-1"]
    assert Entry.made[0].records[0].teardowns == 1


async def test_a_background_job_maps_its_stop_reason_and_cancel_kills_it() -> None:
    failed = await run_task(
        _composition({"stop_reason": "max-tokens"}),
        target="subagent_worker",
        task="x",
        background=True,
    )
    assert failed.job is not None
    assert failed.job.status == "failed"
    assert failed.exit_code == 3
    controller = CancelController()

    def cancel_once_started(event: RunEvent) -> None:
        if isinstance(event, RunNotice):
            controller.cancel("stop")

    killed = await run_task(
        _composition({"hold": True}),
        target="subagent_worker",
        task="x",
        background=True,
        cancel=controller.signal,
        on_event=cancel_once_started,
    )
    assert killed.job is not None
    assert killed.job.status == "killed"
    assert killed.exit_code == 130
    # Killed as soon as the Job existed: its run was torn down, or never published.
    (record,) = Entry.made[0].records
    assert record.teardowns == (0 if record.handle is None else 1)
