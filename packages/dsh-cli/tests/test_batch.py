"""``dsh batch`` without real products: the command's rules against a scripted
in-process provider, the bar on a pseudo-terminal, and the README's example."""

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
from typing import Any, ClassVar

import pytest
from dsh_batch.files import BatchRecord, read_tasks
from dsh_cli.cli import build_parser, main
from dsh_profiles import StaticDiscovery, load_profile
from dsh_subagent import (
    ResolvedSubagentStartRequest,
    SubprocessRunHandle,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict

DSH = Path(sys.executable).with_name("dsh")


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _line(task_id: Any, task: Any = "Do the thing.", **extra: Any) -> str:
    return json.dumps({"id": task_id, "task": task, **extra})


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
    assert "--ray needs Ray: pip install 'dsh-batch[ray]'" in capsys.readouterr().err
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
