"""The dsh command against scripted providers: output streams, exit codes, errors, Ctrl-C."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
import time
import tomllib
import types
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
from dsh_cli import cli as cli_module
from dsh_cli.cli import main
from dsh_profiles import StaticDiscovery, load_profile, open_runtime
from dsh_profiles.profile import read_profile
from dsh_subagent import (
    Budget,
    CancelController,
    ContinuationHandle,
    ParentContext,
    ProductStartError,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_subagent.tool import ToolCallContext, run_tool_call
from pydantic import BaseModel, ConfigDict


class ScriptedConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"
    answer: str = "the answer"
    stop_reason: str = "completed"
    diagnostic: str | None = None
    hold: bool = False
    start_fails: bool = False
    result_raises: bool = False
    budgets: bool = False


class ScriptedEntry(ScriptedProvider):
    """A ScriptedProvider constructed the way the Loader constructs providers."""

    Config: ClassVar[type[ScriptedConfig]] = ScriptedConfig
    instances: ClassVar[list[ScriptedEntry]] = []

    def __init__(self, config: ScriptedConfig) -> None:
        script = Script(
            output=(TextBlock(text=config.answer),),
            stop_reason=config.stop_reason,
            diagnostic=config.diagnostic,
            partial=(TextBlock(text="partial words"),),
            hold_result=anyio.Event() if config.hold else None,
            start_error=_start_error() if config.start_fails else None,
            result_error=OSError("/secret/path/result") if config.result_raises else None,
        )
        super().__init__(config.provider_name, [script])
        self._budgets = config.budgets
        ScriptedEntry.instances.append(self)

    @property
    def honours_budgets(self) -> bool:
        return self._budgets


def _start_error() -> ProductStartError:
    error = ProductStartError("Product subagent failure (product: P; stage: spawn)")
    error.__cause__ = FileNotFoundError("/secret/path/kept/off/the/message")
    return error


DISCOVERY = StaticDiscovery({"scripted": [ScriptedEntry]})


def _profile(tmp_path: Path, config: str = "") -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        f"""
[[providers]]
type = "scripted"
provider_name = "worker"
[providers.config]
{config}

[[tools]]
name = "subagent_worker"
provider = "worker"

[jobs]
""",
        encoding="utf-8",
    )
    return path


def _dsh(*argv: str) -> int:
    return main(list(argv), discovery=DISCOVERY)


def test_check_lists_instances_tools_and_proves_nothing_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()
    assert _dsh("check", str(_profile(tmp_path))) == 0
    out = capsys.readouterr().out
    assert "worker  [type scripted, row 1]" in out
    assert "subagent_worker -> worker (background: one-shot)" in out
    assert "job_output, job_list, job_kill" in out
    assert "product processes started: 0" in out
    assert [p.start_count for p in ScriptedEntry.instances] == [0]


def test_run_prints_the_answer_on_stdout_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()
    code = _dsh("run", str(_profile(tmp_path)), "subagent_worker", "Do it.", "--cwd", str(tmp_path))
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out == "the answer\n"
    assert "worker: completed" in captured.err
    (provider,) = ScriptedEntry.instances
    (record,) = provider.records
    assert record.request.prompt == (TextBlock(text="Do it."),)
    assert record.request.parent.cwd == str(tmp_path)
    assert record.teardowns == 1


@pytest.mark.parametrize(
    ("stop_reason", "code"), [("error", 1), ("max-tokens", 3), ("refusal", 4), ("weird", 1)]
)
def test_failed_run_reports_diagnostic_on_stderr_and_exit_code_from_stop_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stop_reason: str, code: int
) -> None:
    config = f'stop_reason = "{stop_reason}"\ndiagnostic = "safe failure line"'
    assert _dsh("run", str(_profile(tmp_path, config)), "worker", "Do it.") == code
    captured = capsys.readouterr()
    assert f"(stop reason: {stop_reason})" in captured.err
    assert "Diagnostic: safe failure line" in captured.err
    assert "safe failure line" not in captured.out


@pytest.mark.parametrize("task", ["", "   \n\t"])
def test_blank_task_is_a_usage_error_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str
) -> None:
    ScriptedEntry.instances.clear()
    assert _dsh("run", str(_profile(tmp_path)), "worker", task) == 2
    assert "the task is blank" in capsys.readouterr().err
    assert ScriptedEntry.instances == []


@pytest.mark.parametrize(
    ("args", "named"),
    [(("fix \udcff this",), "the task"), (("Do it.", "--cwd", "/tmp/\udcff"), "--cwd")],
)
def test_text_utf8_cannot_encode_is_a_usage_error_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], named: str
) -> None:
    # What an undecodable byte on the command line becomes (surrogateescape).
    ScriptedEntry.instances.clear()
    assert _dsh("run", str(_profile(tmp_path)), "worker", *args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dsh: error: {named} is not valid UTF-8 text")
    assert "fix" not in line
    assert ScriptedEntry.instances == []


def test_unknown_tool_names_the_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _dsh("run", str(_profile(tmp_path)), "subagent_nope", "Do it.") == 2
    err = capsys.readouterr().err
    assert "unknown tool or instance 'subagent_nope'" in err
    assert "tools: subagent_worker; instances: worker" in err
    assert _dsh("run", str(_profile(tmp_path)), "subagent_worker", "x", "--instance") == 2
    assert "unknown instance 'subagent_worker'" in capsys.readouterr().err


def test_bad_profile_names_row_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path, 'colour = "red"')
    assert _dsh("check", str(path)) == 2
    err = capsys.readouterr().err
    assert "providers row 1 ('worker') field 'config.colour': unknown field" in err


def test_ctrl_c_cancels_the_run_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()

    def interrupt_once_the_run_is_live() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ScriptedEntry.instances and ScriptedEntry.instances[0].published_count:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=interrupt_once_the_run_is_live)
    thread.start()
    try:
        code = _dsh("run", str(_profile(tmp_path, "hold = true")), "worker", "Wait forever.")
    finally:
        thread.join()
    captured = capsys.readouterr()
    assert code == 130
    assert "SIGINT: cancelling the run" in captured.err
    assert "(stop reason: aborted)" in captured.err
    (provider,) = ScriptedEntry.instances
    assert provider.records[0].teardowns == 1


def test_background_run_goes_through_the_tool_and_a_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()
    code = _dsh("run", str(_profile(tmp_path)), "subagent_worker", "Do it.", "--background")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == "the answer\n"
    assert "dsh: started background subagent job subagent-1" in captured.err
    assert "dsh: job subagent-1 via subagent_worker: completed" in captured.err
    (provider,) = ScriptedEntry.instances
    assert provider.records[0].teardowns == 1


def test_background_failure_maps_the_stop_reason_from_the_job_detail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = 'stop_reason = "max-tokens"\ndiagnostic = "ran out"'
    path = _profile(tmp_path, config)
    assert _dsh("run", str(path), "subagent_worker", "Do it.", "--background") == 3
    assert "failed (max-tokens; diagnostic: ran out)" in capsys.readouterr().err


def test_background_needs_a_one_shot_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _profile(tmp_path)
    assert _dsh("run", str(path), "worker", "Do it.", "--background", "--instance") == 2
    assert "--background needs a tool" in capsys.readouterr().err


def test_ctrl_c_kills_a_background_job_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()

    def interrupt_once_the_run_is_live() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ScriptedEntry.instances and ScriptedEntry.instances[0].published_count:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=interrupt_once_the_run_is_live)
    thread.start()
    try:
        code = _dsh(
            "run", str(_profile(tmp_path, "hold = true")), "subagent_worker", "x", "--background"
        )
    finally:
        thread.join()
    captured = capsys.readouterr()
    assert code == 130, captured.err
    assert "job subagent-1 via subagent_worker: killed" in captured.err
    assert ScriptedEntry.instances[0].records[0].teardowns == 1


def test_a_start_failure_is_one_line_with_the_safe_message_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = str(_profile(tmp_path, "start_fails = true"))
    assert _dsh("run", profile, "subagent_worker", "x") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "dsh: worker: could not start: Product subagent failure (product: P; stage: spawn)\n"
    )
    # In the background the tool has already answered with a job id; the job then fails.
    assert _dsh("run", profile, "subagent_worker", "x", "--background") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "dsh: job subagent-1 via subagent_worker: failed "
        "(ProductStartError: Product subagent failure (product: P; stage: spawn))"
    )
    assert "/secret/path" not in err


def test_a_result_that_raises_is_one_line_naming_only_the_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _dsh("run", str(_profile(tmp_path, "result_raises = true")), "worker", "Do it.")
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err == "dsh: worker: failed: internal error (OSError)\n"
    assert ScriptedEntry.instances[-1].records[0].teardowns == 1


@pytest.mark.parametrize("argv", [["-v", "check"], ["check", "-v"], ["check", "--verbose"]])
def test_verbose_is_accepted_before_and_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert _dsh(*argv, str(_profile(tmp_path))) == 0
    assert "product processes started: 0" in capsys.readouterr().out


def test_logging_is_routed_only_for_the_command_and_restored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, product = logging.getLogger(), logging.getLogger("dsh.product")
    before = (list(root.handlers), list(product.handlers), product.level, product.propagate)
    assert _dsh("-v", "check", str(_profile(tmp_path))) == 0
    assert _dsh("check", str(_profile(tmp_path))) == 0
    after = (list(root.handlers), list(product.handlers), product.level, product.propagate)
    assert after == before
    capsys.readouterr()


@pytest.mark.parametrize(
    "error",
    [ValueError("the body's own"), ProductStartError("Product subagent failure (x)")],
    ids=["ValueError", "ProductStartError"],
)
def test_open_runtime_raises_a_body_error_unwrapped_and_disposes_runs(
    tmp_path: Path, error: Exception
) -> None:
    ScriptedEntry.instances.clear()
    composition = load_profile(str(_profile(tmp_path, "hold = true")), discovery=DISCOVERY)

    async def body() -> None:
        async with open_runtime(composition) as runtime:
            request = SubagentStartRequest(
                prompt=(TextBlock(text="x"),), parent=ParentContext(session_id="s")
            )
            await runtime.service.start("worker", request)
            raise error

    with pytest.raises(type(error)) as caught:
        anyio.run(body)
    assert caught.value is error
    assert ScriptedEntry.instances[0].records[0].teardowns == 1


def test_timeout_flags_become_the_requests_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()
    profile = str(_profile(tmp_path, "budgets = true"))
    flags = ("--timeout", "90", "--idle-timeout", "2.5")
    assert _dsh("run", profile, "worker", "Do it.", *flags) == 0
    (record,) = ScriptedEntry.instances[0].records
    assert record.request.budget == Budget(deadline_seconds=90.0, idle_timeout_seconds=2.5)
    # Without the flags the request carries no budget at all.
    assert _dsh("run", profile, "worker", "Do it.") == 0
    assert ScriptedEntry.instances[1].records[0].request.budget is None
    capsys.readouterr()


def test_a_provider_that_cannot_honour_a_budget_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ScriptedEntry.instances.clear()
    assert _dsh("run", str(_profile(tmp_path)), "worker", "Do it.", "--timeout", "5") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("dsh: worker: could not start: ")
    assert 'does not honour run budgets (request field "budget")' in line
    assert ScriptedEntry.instances[0].start_count == 0


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--timeout", "0"),
        ("--timeout", "-3"),
        ("--timeout", "abc"),
        ("--timeout", "inf"),
        ("--idle-timeout", "nan"),
        ("--idle-timeout", ""),
    ],
)
def test_a_bad_timeout_is_one_line_naming_the_flag_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    ScriptedEntry.instances.clear()
    profile = str(_profile(tmp_path, "budgets = true"))
    assert _dsh("run", profile, "worker", "Do it.", f"{flag}={value}") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"dsh: error: {flag}: expected a positive number of seconds, got {value!r}\n"
    )
    assert ScriptedEntry.instances == []  # refused before the profile was even loaded


@pytest.mark.parametrize("flag", [("--json",), ("--timeout", "5"), ("--idle-timeout", "5")])
def test_background_refuses_the_foreground_only_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: tuple[str, ...]
) -> None:
    profile = str(_profile(tmp_path, "budgets = true"))
    assert _dsh("run", profile, "subagent_worker", "Do it.", "--background", *flag) == 2
    assert capsys.readouterr().err == (
        "dsh: error: --timeout, --idle-timeout and --json apply to foreground runs only\n"
    )


@pytest.mark.parametrize(("stop_reason", "code"), [("completed", 0), ("max-tokens", 3)])
def test_json_record_carries_the_result_and_nothing_else_reaches_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stop_reason: str, code: int
) -> None:
    diagnostic = None if stop_reason == "completed" else "safe failure line"
    config = f'stop_reason = "{stop_reason}"' + (
        f'\ndiagnostic = "{diagnostic}"' if diagnostic else ""
    )
    assert _dsh("run", str(_profile(tmp_path, config)), "worker", "Do it.", "--json") == code
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record == {
        "answer": "the answer",
        "stop_reason": stop_reason,
        "diagnostic": diagnostic,
        "usage": None,  # the scripted product reported none: never guessed
        "changes": None,  # no isolation
        "elapsed_seconds": record["elapsed_seconds"],
        "continuation": None,  # the scripted provider offers no continuation
    }
    assert record["elapsed_seconds"] >= 0
    assert "Partial output" not in captured.err


def _advertise(monkeypatch: pytest.MonkeyPatch, *found: EntryPoint) -> None:
    """What the installed distributions advertise in the ``dsh.commands`` group, for ``mcp``."""

    def fake(*, group: str, name: str) -> EntryPoints:
        assert (group, name) == ("dsh.commands", "mcp")
        return EntryPoints(found)

    monkeypatch.setattr(cli_module, "entry_points", fake)


def test_mcp_without_dsh_mcp_installed_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `dsh mcp` finds dsh-mcp through its entry point; here no distribution advertises one.
    _advertise(monkeypatch)
    assert main(["-v", "mcp", "profile.toml", "--http"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "dsh: error: `dsh mcp` needs the dsh-mcp distribution, which is not installed "
        "(pip install dsh-mcp)\n"
    )


def test_mcp_whose_module_cannot_be_imported_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dsh_mcp_broken", None)  # importing it raises ImportError
    _advertise(monkeypatch, EntryPoint("mcp", "dsh_mcp_broken:main", "dsh.commands"))
    assert main(["mcp", "profile.toml"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("dsh: error: dsh-mcp cannot be imported: ")
    assert captured.err.count("\n") == 1


def test_mcp_hands_every_argument_after_mcp_to_dsh_mcp(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[list[str], str]] = []

    def fake_main(argv: list[str], *, prog: str) -> int:
        seen.append((argv, prog))
        return 7

    fake = types.ModuleType("fake_dsh_mcp_cli")
    fake.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_dsh_mcp_cli", fake)
    _advertise(monkeypatch, EntryPoint("mcp", "fake_dsh_mcp_cli:main", "dsh.commands"))
    assert main(["mcp", "p.toml", "--workspace", "w", "-v"]) == 7
    assert main(["--verbose", "mcp", "--help"]) == 7
    assert seen == [
        (["p.toml", "--workspace", "w", "-v"], "dsh mcp"),
        (["--verbose", "--help"], "dsh mcp"),
    ]


def test_the_installed_dsh_mcp_advertises_its_command_for_dsh_mcp() -> None:
    # The real lookup `dsh mcp` makes: dsh-mcp's metadata names its own main, which dsh
    # loads only then (dsh-cli imports no distribution above it).
    from dsh_mcp.cli import main as mcp_main

    (entry,) = entry_points(group=cli_module.COMMAND_GROUP, name="mcp")
    assert entry.value == "dsh_mcp.cli:main"
    assert entry.load() is mcp_main


def test_the_profiles_mcp_table_is_left_to_dsh_mcp(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    path.write_text(
        path.read_text(encoding="utf-8") + '\n[mcp]\nworkspace = "."\nanything = 1\n',
        encoding="utf-8",
    )
    composition = load_profile(str(path), discovery=DISCOVERY)
    assert composition.tool_names[0] == "subagent_worker"
    assert read_profile(path).mcp == {"workspace": ".", "anything": 1}


def test_open_runtime_hands_completion_notices_to_the_sink(tmp_path: Path) -> None:
    composition = load_profile(str(_profile(tmp_path)), discovery=DISCOVERY)
    notices: list[tuple[str, str]] = []
    parent = ParentContext(session_id="s", cwd=str(tmp_path))

    async def body() -> None:
        arrived = anyio.Event()

        def sink(owner: ParentContext, text: str) -> None:
            notices.append((owner.session_id, text))
            arrived.set()

        async with open_runtime(composition, notice_sink=sink) as runtime:
            started = await run_tool_call(
                runtime.tools["subagent_worker"],
                {"description": "d", "prompt": "p", "run_in_background": True},
                ToolCallContext(parent=parent, cancel=CancelController().signal),
            )
            assert started.text == "started background subagent job subagent-1"
            with anyio.fail_after(30):
                await arrived.wait()

    anyio.run(body)
    (owner, text) = notices[0]
    assert owner == "s"
    assert text.startswith("background job subagent-1 (subagent: d) finished [status: completed]")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--resume", "not-a-handle"), "dsh: error: --resume: subagent: the continuation handle"),
        (("--resume", "dshc1.e30", "--background"), "dsh: error: --resume applies to foreground"),
    ],
)
def test_a_bad_resume_is_one_line_and_exit_2_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    ScriptedEntry.instances.clear()
    assert _dsh("run", str(_profile(tmp_path)), "subagent_worker", "Do it.", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1
    assert "not-a-handle" not in err
    assert all(entry.start_count == 0 for entry in ScriptedEntry.instances)


def test_resume_on_a_provider_without_continuation_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = ContinuationHandle(provider="worker", product="scripted", session="s-1").dumps()
    assert _dsh("run", str(_profile(tmp_path)), "worker", "Do it.", "--resume", handle) == 1
    err = capsys.readouterr().err
    assert err == (
        'dsh: worker: could not start: subagent provider "worker" does not support the '
        '"continuation" capability (request field "resume")\n'
    )


def test_the_documented_command_entry_point_is_dsh_mcps_own() -> None:
    # docs/cli.md shows how a distribution adds a `dsh` command; the block is dsh-mcp's.
    root = Path(__file__).resolve().parents[3]
    page = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", page, re.S) if "dsh.commands" in b]
    shown = tomllib.loads(block)["project"]["entry-points"]
    with (root / "packages" / "dsh-mcp" / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert shown == {cli_module.COMMAND_GROUP: project["entry-points"][cli_module.COMMAND_GROUP]}
