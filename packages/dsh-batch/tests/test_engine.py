"""The batch engine without real products: the task file, the results file, a task's
workspace, one task as one record, and the first start running alone."""

from __future__ import annotations

import json
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from dsh_batch.engine import FirstStartAlone, run_task, task_cwd
from dsh_batch.files import (
    MAX_TASK_LINE_BYTES,
    BatchRecord,
    BatchTask,
    ResultsFile,
    UsageTotals,
    read_tasks,
)
from dsh_profiles.errors import UsageError
from dsh_subagent import (
    COMPLETED,
    CancelController,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    Usage,
)
from dsh_subagent.testing import Script, ScriptedProvider

DSH = Path(sys.executable).with_name("dsh")


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _line(task_id: Any, task: Any = "Do the thing.", **extra: Any) -> str:
    return json.dumps({"id": task_id, "task": task, **extra})


# --- the task file -----------------------------------------------------------------------


def test_bad_lines_are_reported_with_their_line_number_and_the_rest_is_kept(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "tasks.jsonl",
        _line("a"),
        "",  # blank: no task, nothing to report
        "{not json",
        "[1, 2]",
        json.dumps({"task": "no id"}),
        _line(7),
        _line(""),
        _line("b", "   "),
        _line("c", cwd=3),
        _line("d", prompt="typo"),
        _line("a", "again"),
        _line("e", cwd="sub"),
    )
    listed = read_tasks(path)
    assert [(t.id, t.cwd) for t in listed.tasks] == [("a", None), ("e", "sub")]
    assert [(b.line_no, b.reason) for b in listed.bad_lines] == [
        (3, "not valid JSON"),
        (4, "not a JSON object"),
        (5, "field 'id' is missing"),
        (6, "field 'id' must be a string"),
        (7, "field 'id' is empty"),
        (8, "field 'task' is blank"),
        (9, "field 'cwd' must be a string"),
        (10, "unknown field 'prompt'"),
        (11, "duplicate id 'a' (first on line 1)"),
    ]


@pytest.mark.parametrize("task_id", ["a\nb", "red \x1b[31mALERT", "rtl\u202eexe.txt", "nul\x00"])
def test_an_id_with_a_control_character_is_a_bad_line(tmp_path: Path, task_id: str) -> None:
    """The id is printed on the terminal (progress lines, the summary): a newline would
    forge a line, an escape sequence would rewrite the screen."""
    path = _write(tmp_path / "tasks.jsonl", _line(task_id), _line("ok"))
    listed = read_tasks(path)
    assert [t.id for t in listed.tasks] == ["ok"]
    assert [(b.line_no, b.reason) for b in listed.bad_lines] == [
        (1, "field 'id' must not hold control or format characters")
    ]


def test_an_overlong_line_is_read_past_without_being_held(tmp_path: Path) -> None:
    """A 40 MiB line (a data dump pasted as a task) is a bad line, and reading the file
    never holds it: the task file is read line by line, each line bounded."""
    path = tmp_path / "tasks.jsonl"
    with path.open("wb") as out:
        out.write(b'{"id": "dump", "task": "' + b"x" * (40 << 20) + b'"}\n')
        out.write(_line("after").encode() + b"\n")
        out.write(_line("last").encode())  # no newline at the end
    tracemalloc.start()
    try:
        listed = read_tasks(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [t.id for t in listed.tasks] == ["after", "last"]
    assert [(b.line_no, b.reason) for b in listed.bad_lines] == [
        (1, f"longer than {MAX_TASK_LINE_BYTES} bytes")
    ]
    assert peak < 8 << 20, f"held {peak} bytes reading the file"


def test_a_bad_line_never_echoes_its_content(tmp_path: Path) -> None:
    secret = "sk-planted-in-a-bad-line"
    path = _write(tmp_path / "tasks.jsonl", '{"id": "x", "task": "' + secret)
    (bad,) = read_tasks(path).bad_lines
    assert secret not in bad.reason


@pytest.mark.parametrize("kind", ["fifo", "endless"])
def test_a_results_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    """A FIFO could not be read back (it was an internal error: ESPIPE) and ``/dev/zero``
    would be read until memory ran out."""
    if kind == "fifo":
        path = tmp_path / "results.fifo"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    results = ResultsFile(path)
    with pytest.raises(UsageError) as caught:
        results.open()
    assert str(caught.value) == (
        f"the results file {str(path)!r} is not a regular file; give the path of a file "
        "to append records to"
    )


def test_the_results_file_gives_done_ids_and_a_cut_short_line_runs_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.jsonl"
    whole = BatchRecord(id="a", stop_reason="completed", answer="x", elapsed_seconds=1.0)
    path.write_text(whole.to_line() + '{"id": "b", "stop_rea', encoding="utf-8")
    results = ResultsFile(path)
    results.open()
    try:
        assert results.done == {"a"}
        assert results.unreadable == [2]
        results.append(BatchRecord(id="b", stop_reason="error", elapsed_seconds=0.5))
    finally:
        results.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3  # the cut-short line stays its own line; the record follows it
    assert json.loads(lines[2])["id"] == "b"
    again = ResultsFile(path)
    again.open()
    again.close()
    assert again.done == {"a", "b"}
    assert again.completed == {"a"}


def test_the_latest_record_per_id_counts(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(
        BatchRecord(id="a", stop_reason="error", elapsed_seconds=1.0).to_line()
        + BatchRecord(id="b", stop_reason="completed", elapsed_seconds=1.0).to_line()
        + BatchRecord(id="a", stop_reason="completed", elapsed_seconds=2.0).to_line()
        + BatchRecord(id="b", stop_reason="error", elapsed_seconds=2.0).to_line(),
        encoding="utf-8",
    )
    results = ResultsFile(path)
    results.open()
    results.close()
    assert results.completed == {"a"}
    assert results.latest["b"].elapsed_seconds == 2.0


def test_a_results_file_the_batch_created_and_never_wrote_is_removed(tmp_path: Path) -> None:
    """Deliberate: a batch refused before its first task leaves no (empty) results file."""
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.open()
    assert path.exists()
    results.close()
    assert not path.exists()
    path.write_text("", encoding="utf-8")  # one the user made stays
    results = ResultsFile(path)
    results.open()
    results.close()
    assert path.exists()


def test_the_lock_refuses_a_second_holder_at_once(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    first = ResultsFile(path)
    first.open()
    try:
        with pytest.raises(UsageError, match="another dsh batch is writing the results file"):
            ResultsFile(path).open()
    finally:
        first.close()
    second = ResultsFile(path)
    second.open()  # free again once the first closed
    second.close()


def test_usage_totals_name_what_was_reported_and_how_much_of_it() -> None:
    def record(usage: Usage | None) -> BatchRecord:
        return BatchRecord(id="x", stop_reason="completed", usage=usage, elapsed_seconds=1.0)

    totals = UsageTotals()
    assert totals.describe() == ""
    totals.add(record(Usage(input_tokens=1843, output_tokens=61, cost_usd=0.01)))
    totals.add(record(Usage(input_tokens=1000, output_tokens=39, cost_usd=0.0025)))
    assert totals.describe() == "tokens 2,843 in, 100 out; cost $0.0125"
    totals.add(record(None))
    totals.add(record(Usage(input_tokens=7, output_tokens=1)))
    assert totals.describe() == (
        "tokens 2,850 in, 101 out (3 of 4 tasks reported); cost $0.0125 (2 of 4 tasks reported)"
    )


def test_task_cwd_resolves_against_the_base_and_names_the_files_directory() -> None:
    task = BatchTask(id="t", task="x", cwd="${DSH_FILES}/repo")
    assert task_cwd(task, "/base", "/files") == "/files/repo"
    assert task_cwd(BatchTask(id="t", task="x", cwd="sub/../here"), "/base", None) == "/base/here"
    assert task_cwd(BatchTask(id="t", task="x"), "/base", None) == "/base"
    assert task_cwd(BatchTask(id="t", task="x", cwd="/abs"), "/base", None) == "/abs"


class _UsageRun:
    id = "run-1"

    async def result(self) -> SubagentResult:
        usage = Usage(input_tokens=120, cached_input_tokens=20, output_tokens=7, cost_usd=0.01)
        return SubagentResult(output=(TextBlock(text="ok"),), stop_reason=COMPLETED, usage=usage)

    async def dispose(self) -> None:
        return None


class _UsageService:
    async def start(self, provider: str, request: SubagentStartRequest) -> _UsageRun:
        return _UsageRun()


@pytest.mark.anyio
async def test_a_record_carries_the_usage_the_product_reported() -> None:
    service = cast(SubagentService, _UsageService())
    task = BatchTask(id="u", task="Count.")
    record = await run_task(service, "p", task, "/", CancelController().signal)
    assert record is not None
    assert record.usage == Usage(
        input_tokens=120, cached_input_tokens=20, output_tokens=7, cost_usd=0.01
    )
    assert json.loads(record.to_line())["usage"] == {
        "input_tokens": 120,
        "cached_input_tokens": 20,
        "output_tokens": 7,
        "reasoning_tokens": None,
        "cost_usd": 0.01,
    }


@pytest.mark.anyio
async def test_a_run_cancelled_by_the_interrupt_is_not_recorded() -> None:
    """Deliberate: an interrupted task has no record, so resuming the batch runs it again."""
    gate = anyio.Event()
    provider = ScriptedProvider("held", [Script(hold_result=gate)])
    controller = CancelController()
    async with SubagentService() as service:
        service.register_provider(provider)
        async with anyio.create_task_group() as tg:
            outcome: list[BatchRecord | None] = []

            async def one() -> None:
                task = BatchTask(id="h", task="Wait.")
                outcome.append(await run_task(service, "held", task, "/", controller.signal))

            tg.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            controller.cancel("interrupted (SIGINT)")
    assert outcome == [None]


@pytest.mark.anyio
async def test_the_first_product_start_runs_alone_and_later_starts_overlap() -> None:
    """Deliberate: two Codex app-servers initialising one fresh CODEX_HOME at once race
    (one exits during ``initialize``), so a batch's first start goes alone; once one
    start succeeded, starts run side by side again."""
    first, later = anyio.Event(), anyio.Event()
    provider = ScriptedProvider(
        "p",
        [
            Script(hold_start=first, output=(TextBlock(text="1"),)),
            Script.answer("2"),
            Script.answer("3"),
            Script(hold_start=later, output=(TextBlock(text="4"),)),
            Script(hold_start=later, output=(TextBlock(text="5"),)),
        ],
    )
    gate = FirstStartAlone()
    records: list[BatchRecord | None] = []
    async with SubagentService() as service:
        service.register_provider(provider)

        async def one(n: int) -> None:
            task = BatchTask(id=str(n), task="Go.")
            cancel = CancelController().signal
            records.append(await run_task(service, "p", task, "/", cancel, None, gate))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(one, 2)
            tg.start_soon(one, 3)
            await anyio.wait_all_tasks_blocked()
            assert provider.start_count == 1  # 2 and 3 wait for the first start
            first.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 4)
            tg.start_soon(one, 5)
            await anyio.wait_all_tasks_blocked()
            assert provider.start_count == 5  # both starts are in progress at once
            later.set()
    assert sorted(r.answer for r in records if r is not None) == ["1", "2", "3", "4", "5"]
