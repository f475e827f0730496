"""``dsh batch`` without real products: the task file, the results file, the command's
rules against a scripted in-process provider, and the bar on a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio
import pytest
from dsh_cli.batch import FirstStartAlone, run_task, task_cwd
from dsh_cli.batch_io import BatchRecord, BatchTask, ResultsFile, UsageTotals, read_tasks
from dsh_cli.cli import build_parser, main
from dsh_profiles import StaticDiscovery, load_profile
from dsh_profiles.errors import UsageError
from dsh_subagent import (
    COMPLETED,
    CancelController,
    ResolvedSubagentStartRequest,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    SubprocessRunHandle,
    TextBlock,
    Usage,
)
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict

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


def test_a_bad_line_never_echoes_its_content(tmp_path: Path) -> None:
    secret = "sk-planted-in-a-bad-line"
    path = _write(tmp_path / "tasks.jsonl", '{"id": "x", "task": "' + secret)
    (bad,) = read_tasks(path).bad_lines
    assert secret not in bad.reason


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


# --- the command against a scripted provider --------------------------------------------


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"


class _Scripted(ScriptedProvider):
    """Answers ``echo:<text>`` tasks, fails ``fail`` tasks, raises on ``raise``."""

    Config: ClassVar[type[_Config]] = _Config

    def __init__(self, config: _Config) -> None:
        super().__init__(config.provider_name, [Script.answer("unused")])

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        # One script per start, picked from the task text (the base class takes the
        # last script of its list, synchronously, before anything awaits).
        text = request.prompt[0].text if isinstance(request.prompt[0], TextBlock) else ""
        if text == "fail":
            script = Script(attempt_error=RuntimeError("x"), error_diagnostic="scripted failure")
        elif text == "raise":
            script = Script(result_error=OSError("/secret/path/result"))
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


def _batch(profile: Path, tasks: Path, out: Path, *extra: str) -> int:
    argv = ["batch", str(profile), "subagent_scripted", str(tasks), "--out", str(out)]
    return main([*argv, "--cwd", str(tasks.parent), *extra], discovery=DISCOVERY)


def test_a_batch_of_scripted_tasks_writes_one_record_each_and_plain_lines(
    tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", _line("a", "echo:alpha"), _line("b", "echo:beta"))
    out = tmp_path / "results.jsonl"
    assert _batch(profile, tasks, out) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3, err
    assert [line.split("] ")[0] for line in err[:2]] == ["dsh: [1/2", "dsh: [2/2"]
    settled = sorted(line.split("] ")[1].split(" in ")[0] for line in err[:2])
    assert settled == ["a: completed", "b: completed"]
    assert err[-1] == f"dsh: batch: 2 completed, 0 failed; results in {out}"
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: r["answer"] for r in records} == {"a": "alpha", "b": "beta"}
    # `structured` is written only for a task with an output schema (records are as before).
    assert all(set(r) == set(BatchRecord.model_fields) - {"structured"} for r in records)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "0"], "argument -j/--concurrency: must be positive: '0'"),
        (["--ray-retries", "-1"], "argument --ray-retries: must be 0 or more: '-1'"),
    ],
)
def test_bad_numbers_are_usage_errors(
    tmp_path: Path,
    profile: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    with pytest.raises(SystemExit) as exited:
        _batch(profile, tasks, tmp_path / "out.jsonl", *argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "0"), ("--idle-timeout", "nan")])
def test_a_bad_timeout_gets_the_same_line_as_dsh_run_and_starts_nothing(
    tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    out = tmp_path / "out.jsonl"
    assert _batch(profile, tasks, out, f"{flag}={value}") == 2
    assert capsys.readouterr().err == (
        f"dsh: error: {flag}: expected a positive number of seconds, got {value!r}\n"
    )
    assert not out.exists()


def test_a_profile_naming_the_files_directory_needs_files_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "scripted"\nprovider_name = "${DSH_FILES}"\n', encoding="utf-8"
    )
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    out = tmp_path / "out.jsonl"
    code = main(["batch", str(profile), "x", str(tasks), "--out", str(out)], discovery=DISCOVERY)
    assert code == 2
    assert "the profile uses ${DSH_FILES}: pass --files DIR" in capsys.readouterr().err
    assert not out.exists()


def test_with_ray_a_relative_cwd_is_refused_before_anything_starts(
    tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    argv = ["batch", str(profile), "subagent_scripted", str(tasks), "--out", "o.jsonl"]
    code = main([*argv, "--ray", "--cwd", "relative/dir"], discovery=DISCOVERY)
    assert code == 2
    assert "with --ray, --cwd must be an absolute path" in capsys.readouterr().err


def test_failures_become_records_with_safe_diagnostics(
    tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = _write(
        tmp_path / "tasks.jsonl",
        _line("ok", "echo:fine"),
        _line("bad", "fail"),
        _line("boom", "raise"),
    )
    out = tmp_path / "results.jsonl"
    assert _batch(profile, tasks, out, "--concurrency", "1") == 1
    assert "dsh: batch: 1 completed, 2 failed" in capsys.readouterr().err
    by_id = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert (by_id["bad"]["stop_reason"], by_id["bad"]["diagnostic"]) == (
        "error",
        "scripted failure",
    )
    assert by_id["boom"]["diagnostic"] == "internal error (OSError)"
    assert "secret" not in out.read_text(encoding="utf-8")


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


# --- the bar on a terminal ---------------------------------------------------------------


def test_on_a_terminal_the_bar_shows_done_failed_running_and_an_eta(tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "example"\n\n'
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    tasks = _write(
        tmp_path / "tasks.jsonl",
        _line("one", "dsh-contract/1 complete T-0a0a0a01"),
        _line("two", "dsh-contract/1 fail T-0b0b0b02"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path), COLUMNS="160", TERM="xterm")
    leader, follower = pty.openpty()
    argv = [str(DSH), "batch", str(profile), "subagent_example", str(tasks)]
    proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, not a product
        [*argv, "--out", str(tmp_path / "out.jsonl"), "--cwd", str(tmp_path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    screen = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: dsh exited
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(leader)
        code = proc.wait(timeout=120)
    text = screen.decode("utf-8", "replace")
    assert code == 1, text
    assert "dsh batch" in text
    assert "2/2" in text
    assert "done 1 · failed 1 · running 0" in text
    assert "ETA" in text
    assert "dsh: batch: 1 completed, 1 failed; results in" in text


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


def test_the_readme_batch_example_is_a_good_task_file_and_command(tmp_path: Path) -> None:
    readme = Path(__file__).resolve().parents[1] / "README.md"
    section = readme.read_text(encoding="utf-8").split("## Many tasks: `dsh batch`", 1)[1]
    jsonl = re.search(r"```jsonl\n(.*?)```", section, re.DOTALL)
    command = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert jsonl is not None
    assert command is not None
    listed = read_tasks(_write(tmp_path / "tasks.jsonl", jsonl.group(1).rstrip("\n")))
    assert listed.bad_lines == ()
    assert [task.id for task in listed.tasks] == ["issue-101", "issue-102"]
    argv = command.group(1).split()
    assert argv[:2] == ["dsh", "batch"]
    args = build_parser().parse_args(argv[1:])
    assert (args.target, args.tasks, args.out, args.concurrency) == (
        "subagent_codex",
        "tasks.jsonl",
        "results.jsonl",
        4,
    )
    repo = Path(__file__).resolve().parents[3]
    composition = load_profile(repo / args.profile)  # starts nothing
    assert "subagent_codex" in composition.tool_names


def test_without_ray_installed_ray_is_a_usage_error_and_nothing_is_written(
    tmp_path: Path,
    profile: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    out = tmp_path / "out.jsonl"
    assert _batch(profile, tasks, out, "--ray") == 2
    assert "--ray needs Ray: pip install 'dsh-cli[ray]'" in capsys.readouterr().err
    assert not out.exists()


def test_an_unreachable_ray_address_is_one_line_before_anything_starts(
    tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tasks = _write(tmp_path / "tasks.jsonl", _line("a"))
    out = tmp_path / "out.jsonl"
    assert _batch(profile, tasks, out, "--ray", f"127.0.0.1:{port}") == 2
    err = capsys.readouterr().err
    assert err == f"dsh: error: could not reach Ray at 127.0.0.1:{port}: Connection refused\n"
    assert not out.exists()
