"""``run_batch``: the Python entry point, against a scripted in-process provider."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from dsh_batch import (
    BatchEvent,
    BatchRecord,
    Notice,
    TaskLeft,
    TaskSettled,
    TaskStarted,
    run_batch,
)
from dsh_profiles.discovery import StaticDiscovery
from dsh_profiles.errors import UsageError
from dsh_subagent import (
    CancelController,
    ResolvedSubagentStartRequest,
    SubprocessRunHandle,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"


class _Scripted(ScriptedProvider):
    """Answers ``echo:<text>`` tasks and fails ``fail`` tasks; counts its starts."""

    Config: ClassVar[type[_Config]] = _Config
    starts: ClassVar[int] = 0

    def __init__(self, config: _Config) -> None:
        super().__init__(config.provider_name, [Script.answer("unused")])

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        type(self).starts += 1
        text = request.prompt[0].text if isinstance(request.prompt[0], TextBlock) else ""
        if text == "fail":
            script = Script(attempt_error=RuntimeError("x"), error_diagnostic="scripted failure")
        elif text == "hold":  # until cancelled
            script = Script(output=(TextBlock(text="held"),), hold_result=anyio.Event())
        else:
            script = Script.answer(text.removeprefix("echo:"))
        self._scripts = [script]
        return await super().start(request)


DISCOVERY = StaticDiscovery({"scripted": [_Scripted]})


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        '[[providers]]\ntype = "scripted"\n\n'
        '[[tools]]\nname = "subagent_scripted"\nprovider = "scripted"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    return path


def _run(profile: Path, tasks: list[Any], **options: Any) -> list[BatchRecord]:
    return run_batch(
        tasks,
        profile=profile,
        target="subagent_scripted",
        cwd=profile.parent,
        discovery=DISCOVERY,
        **options,
    )


def test_records_come_back_in_task_order_with_the_events(profile: Path) -> None:
    events: list[BatchEvent] = []
    records = _run(
        profile,
        [{"id": "a", "task": "echo:alpha"}, {"id": "b", "task": "fail"}],
        observer=events.append,
        concurrency=2,
    )
    assert [(r.id, r.stop_reason, r.answer) for r in records] == [
        ("a", "completed", "alpha"),
        ("b", "error", ""),
    ]
    assert sorted(type(e).__name__ for e in events) == sorted(
        ["TaskStarted", "TaskStarted", "TaskSettled", "TaskSettled"]
    )
    assert {e.id for e in events if isinstance(e, TaskStarted)} == {"a", "b"}
    assert not any(isinstance(e, TaskLeft | Notice) for e in events)


def test_a_results_file_resumes_and_retry_failed_reruns_the_failed_task(
    profile: Path, tmp_path: Path
) -> None:
    out = tmp_path / "results.jsonl"
    tasks = [{"id": "a", "task": "echo:alpha"}, {"id": "b", "task": "fail"}]
    _run(profile, tasks, out=out)
    before = _Scripted.starts
    again = _run(profile, tasks, out=out)  # everything has a record: nothing runs
    assert _Scripted.starts == before
    assert [r.stop_reason for r in again] == ["completed", "error"]
    retried = _run(
        profile, [tasks[0], {"id": "b", "task": "echo:fixed"}], out=out, retry_failed=True
    )
    assert _Scripted.starts == before + 1  # only the failed task ran again
    assert [(r.id, r.answer) for r in retried] == [("a", "alpha"), ("b", "fixed")]
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == ["a", "b", "b"] or [line["id"] for line in lines] == [
        "b",
        "a",
        "b",
    ]


@pytest.mark.parametrize(
    ("options", "tasks", "message"),
    [
        ({"concurrency": 0}, [{"id": "a", "task": "x"}], "field 'concurrency'"),
        ({"colour": "red"}, [{"id": "a", "task": "x"}], "unknown field 'colour'"),
        ({"ray_retries": -1}, [{"id": "a", "task": "x"}], "field 'ray_retries'"),
        ({}, [{"id": "a"}], r"tasks\[0\]: field 'task' is missing"),
        ({}, [{"id": "a", "task": "x"}, {"id": "a", "task": "y"}], r"tasks\[1\]: duplicate id"),
        ({}, [{"id": "a", "task": "  "}], r"tasks\[0\]: field 'task' is blank"),
        ({}, [{"id": "a\x1b[2J", "task": "x"}], r"tasks\[0\]: field 'id' must not hold control"),
        ({}, [{"id": "a", "task": "x", "cwd": "missing"}], "'a'.*not an accessible directory"),
        ({"output_schema": {"type": "array"}}, [{"id": "a", "task": "x"}], "'output_schema'"),
        # A setting of the call, not of the profile: named as the call's, on one line.
        ({"confinement": "strict"}, [{"id": "a", "task": "x"}], r"^run_batch: field 'confinement'"),
        ({}, "Summarise the README.", r"^run_batch: tasks must be a list of tasks"),
        ({}, [{"id": "a", "task": "x"}, "y"], r"^run_batch: tasks\[1\]: must be a mapping"),
    ],
)
def test_bad_input_names_the_field_and_starts_nothing(
    profile: Path, tmp_path: Path, options: dict[str, Any], tasks: list[Any], message: str
) -> None:
    before = _Scripted.starts
    out = tmp_path / "results.jsonl"
    with pytest.raises(UsageError, match=message):
        _run(profile, tasks, out=out, **options)
    assert _Scripted.starts == before
    assert not out.exists()  # nothing recorded, not even an empty file


def test_a_cancelled_batch_returns_what_settled_and_records_nothing_else(profile: Path) -> None:
    """Deliberate: a task the cancel stopped has no record, so the next call runs it."""
    controller = CancelController()
    controller.cancel("stop")  # before the first task: nothing may start
    before = _Scripted.starts
    records = _run(profile, [{"id": "a", "task": "echo:alpha"}], cancel=controller.signal)
    assert records == []
    assert _Scripted.starts == before


def test_it_refuses_to_run_inside_an_event_loop_with_a_clear_error(profile: Path) -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError):
            _run(profile, [{"id": "a", "task": "echo:alpha"}])

    anyio.run(inside)


def test_it_leaves_the_hosts_signal_handlers_as_they_were(profile: Path) -> None:
    """Deliberate: a library leaves SIGTERM to its host (``cancel=`` is how to stop a batch);
    only the event loop's own Ctrl-C handling (asyncio's runner) is in place meanwhile."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    during: list[object] = []

    def observe(event: BatchEvent) -> None:
        during.append(signal.getsignal(signal.SIGTERM))

    _run(profile, [{"id": "a", "task": "echo:alpha"}], observer=observe)
    assert during
    assert all(handler == before[signal.SIGTERM] for handler in during)
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_handle_signals_stops_the_batch_at_sigint_and_puts_the_handlers_back(
    profile: Path, tmp_path: Path
) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    events: list[BatchEvent] = []

    def interrupt_once_started(event: BatchEvent) -> None:
        events.append(event)
        if isinstance(event, TaskStarted):
            os.kill(os.getpid(), signal.SIGINT)

    out = tmp_path / "results.jsonl"
    records = _run(
        profile,
        [{"id": "a", "task": "hold"}],
        out=out,
        observer=interrupt_once_started,
        handle_signals=True,
    )
    assert records == []  # cancelled, so not recorded: the next call runs it
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert notices == ["SIGINT: cancelling 1 running task(s); waiting for every product to exit"]
    assert [type(e).__name__ for e in events if not isinstance(e, Notice)] == [
        "TaskStarted",
        "TaskLeft",
    ]
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_each_task_starts_before_it_settles(profile: Path) -> None:
    events: list[BatchEvent] = []
    _run(profile, [{"id": str(n), "task": f"echo:{n}"} for n in range(4)], observer=events.append)
    for n in range(4):
        kinds = [
            type(e).__name__
            for e in events
            if (isinstance(e, TaskStarted) and e.id == str(n))
            or (isinstance(e, TaskSettled) and e.record.id == str(n))
        ]
        assert kinds == ["TaskStarted", "TaskSettled"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cwd": "/nonexistent/dir"}, "run_batch: field 'cwd': '/nonexistent/dir' is not an"),
        ({"out": "."}, "run_batch: field 'out': '.' is a directory"),
        ({"files": "/nonexistent/dir"}, "run_batch: field 'files': "),
    ],
)
def test_a_bad_path_is_named_by_its_field(
    profile: Path, options: dict[str, Any], message: str
) -> None:
    before = _Scripted.starts
    with pytest.raises(UsageError, match=re.escape(message)):
        run_batch(
            [{"id": "a", "task": "x"}],
            profile=profile,
            target="subagent_scripted",
            discovery=DISCOVERY,
            **{"cwd": profile.parent, **options},
        )
    assert _Scripted.starts == before
