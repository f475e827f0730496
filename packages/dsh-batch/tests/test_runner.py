"""``BatchRun``: the one path ``run_batch`` and ``dsh batch`` share after the profile is
loaded (its results file's lock, the tasks it chooses, its checks, its run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_batch.engine import Summary
from dsh_batch.files import BatchRecord, BatchTask, ResultsFile
from dsh_batch.runner import BatchRun, BatchSetup
from dsh_profiles import StaticDiscovery, UsageError, load_profile
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_worktree import Worktree
from pydantic import BaseModel, ConfigDict


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"


class _Answers(ScriptedProvider):
    Config: ClassVar[type[_Config]] = _Config
    made: ClassVar[list[_Answers]] = []

    def __init__(self, config: _Config) -> None:
        super().__init__(config.provider_name, [Script.answer("ok")])
        _Answers.made.append(self)


def _setup(tmp_path: Path, tasks: list[BatchTask], **changes: object) -> BatchSetup:
    profile = tmp_path / "profile.toml"
    profile.write_text('[[providers]]\ntype = "scripted"\n', encoding="utf-8")
    _Answers.made.clear()
    composition = load_profile(profile, discovery=StaticDiscovery({"scripted": [_Answers]}))
    setup = BatchSetup(
        composition,
        "scripted",
        tuple(tasks),
        profile=profile,
        base=str(tmp_path),
        files=None,
        no_files="no files given",
        concurrency=2,
        tasks_name="tasks.jsonl",
        line_of={"b": 7},
    )
    return dataclasses.replace(setup, **changes)  # type: ignore[arg-type]


A = BatchTask(id="a", task="first")
B = BatchTask(id="b", task="second")


def test_it_runs_only_what_the_results_file_does_not_hold(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    records = [
        BatchRecord(id="a", stop_reason="completed", elapsed_seconds=1),
        BatchRecord(id="b", stop_reason="error", elapsed_seconds=1),
    ]
    out.write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    with BatchRun(_setup(tmp_path, [A, B]), ResultsFile(out)) as batch:
        assert batch.todo == ()
        assert (batch.skipped, batch.skipped_failed, batch.again) == (2, 1, 0)
        assert batch.run() == Summary(0, 0, False, 0)  # nothing to run: nothing starts
    assert _Answers.made[0].start_count == 0
    setup = _setup(tmp_path, [A, B], retry_failed=True)
    with BatchRun(setup, ResultsFile(out)) as batch:
        assert batch.todo == (B,)
        assert (batch.skipped, batch.skipped_failed, batch.again) == (1, 0, 1)
        batch.check()
        summary = batch.run()
        assert batch.latest["b"].stop_reason == "completed"
    assert summary == Summary(1, 0, False, 0)


def test_without_a_results_file_the_records_are_kept(tmp_path: Path) -> None:
    with BatchRun(_setup(tmp_path, [A, B]), None) as batch:
        batch.check()
        assert batch.run().done == 2
        assert sorted(batch.latest) == ["a", "b"]


@pytest.mark.parametrize(
    ("task", "changes", "message"),
    [
        (BatchTask(id="b", task="x", cwd="${DSH_FILES}/w"), {}, "^no files given$"),
        (
            BatchTask(id="b", task="x", cwd="missing"),
            {},
            "^tasks.jsonl line 7: task 'b': cwd .* is not an accessible directory",
        ),
        (B, {"isolation": Worktree(branch="one")}, "names one branch for 2 tasks"),
    ],
)
def test_check_refuses_with_the_setups_own_words_and_starts_nothing(
    tmp_path: Path, task: BatchTask, changes: dict[str, object], message: str
) -> None:
    batch = BatchRun(_setup(tmp_path, [A, task], **changes), None)
    with batch, pytest.raises(UsageError, match=message):
        batch.check()
    assert _Answers.made[0].start_count == 0


@pytest.mark.parametrize(
    ("summary", "bad_lines", "code"),
    [
        (Summary(2, 0, False, 0), 0, 0),
        (Summary(2, 0, False, 0), 1, 1),  # a bad task line fails the batch
        (Summary(1, 1, False, 0), 0, 1),
        (Summary(1, 0, True, 1), 0, 130),
        (Summary(1, 0, True, 1, error="ray went away"), 0, 1),
    ],
)
def test_the_exit_status_of_a_summary(summary: Summary, bad_lines: int, code: int) -> None:
    assert summary.exit_code(bad_lines) == code
