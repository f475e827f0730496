"""``dsh model serve`` from a user's terminal: the real ``dsh``, the real Codex and Claude Code.

The server is the venv's ``dsh`` in its own session, as a terminal starts it; the runs
are ``dsh run`` against the profile it printed. Every product process carries the
sandbox's marker, so a process left behind is found.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import psutil
import pytest
from cli_sandbox import DSH, Dsh, Sandbox, dsh, finish, no_traceback, run, wait_for_file
from dsh_contract_tests.fixtures import keyless_profile
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES

# Quotes, a dollar sign and two lines: the file must hold exactly this, unexpanded.
CONTENT = 'it\'s $HOME, "quoted"\nsecond line\n'
SCRIPT = f"""
[[rules]]
task_contains = "EDIT-TASK"
steps = [
  {{ run = "pwd > where.txt" }},
  {{ write = "edited.txt", content = {json.dumps(CONTENT)} }},
  {{ answer = "EDITED" }},
]

[[rules]]
task_contains = "FAIL-TASK"
steps = [{{ error = 503, message = "scripted outage" }}]

[[rules]]
task_contains = "HOLD-TASK"
steps = [{{ hold = true, then = "RELEASED" }}]

[[rules]]
steps = [{{ answer = "FALLBACK" }}]
"""
TOOLS = {"codex": "subagent_codex", "claude-code": "subagent_claude_code"}


@dataclass
class Server:
    proc: Dsh
    directory: Path
    profile: Path

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, str, str]:
        os.killpg(self.proc.pid, signum)
        return finish(self.proc)

    def others(self, box: Sandbox) -> list[int]:
        """Live processes of the sandbox other than the server itself."""
        return leftovers(box, but=self.proc.pid)


def leftovers(box: Sandbox, but: int | None = None) -> list[int]:
    """The sandbox's live processes (``but`` aside) once dsh-subprocess's guards ended.

    A guard server ends on its own moments after the dsh that started it: it is waited
    for (a failure bound, not a timing) rather than reported while it is still leaving.
    """
    alive = [p for p in box.survivors() if p.pid != but]
    guards = [p for p in alive if _is_guard(p)]
    _, stuck = psutil.wait_procs(guards, timeout=60)
    return sorted(p.pid for p in alive if p not in guards) + [p.pid for p in stuck]


def _is_guard(proc: psutil.Process) -> bool:
    try:
        return any(arg.endswith("_guard.py") for arg in proc.cmdline())
    except psutil.Error:
        return False


def _script(box: Sandbox, text: str = SCRIPT, name: str = "model.toml") -> Path:
    path = box.root / name
    path.write_text(text, encoding="utf-8")
    return path


def _env(box: Sandbox) -> None:
    for name in AMBIENT_MODEL_VARIABLES:
        box.env.pop(name, None)


@pytest.fixture
def server(sandbox: Sandbox) -> Iterator[Server]:
    _env(sandbox)
    directory = sandbox.root / "model"
    proc = dsh(sandbox, "model", "serve", str(_script(sandbox)), "--dir", str(directory))
    profile = directory / "profile.toml"
    wait_for_file(profile, proc)
    served = Server(proc, directory, profile)
    yield served
    if proc.poll() is None:
        code, _, err = served.stop()
        assert code == 0, err


def _workspace(box: Sandbox, name: str) -> Path:
    path = box.root / name
    path.mkdir()
    return path


@pytest.mark.keyless
@pytest.mark.parametrize("product", ["codex", "claude-code"])
def test_the_real_product_runs_the_command_and_writes_the_file_the_script_says(
    sandbox: Sandbox, server: Server, product: str
) -> None:
    work = _workspace(sandbox, "work")
    code, out, err = run(
        sandbox, "run", str(server.profile), TOOLS[product], "EDIT-TASK now", "--cwd", str(work)
    )
    assert code == 0, err
    assert out == "EDITED\n"
    assert (work / "where.txt").read_text(encoding="utf-8").strip() == str(work)
    assert (work / "edited.txt").read_text(encoding="utf-8") == CONTENT
    assert server.others(sandbox) == []
    code, _, log = server.stop()
    assert code == 0, log
    wire = "Responses" if product == "codex" else "Messages"
    assert [line for line in log.splitlines() if line.startswith(f"dsh model: {wire}")] == [
        f"dsh model: {wire}: rule 1, step 1/3: run",
        f"dsh model: {wire}: rule 1, step 2/3: write",
        f"dsh model: {wire}: rule 1, step 3/3: answer",
    ]


@pytest.mark.keyless
@pytest.mark.parametrize(
    ("product", "diagnostic"),
    [
        (
            "codex",
            "Product subagent failure (product: Codex; stage: turn; "
            "category: httpConnectionFailed; HTTP status: 503)",
        ),
        (
            "claude-code",
            "Product subagent failure (product: Claude Code; stage: query-run; "
            "category: invalid-success; HTTP status: 503)",
        ),
    ],
)
def test_an_error_step_gives_the_products_error_result(
    sandbox: Sandbox, server: Server, product: str, diagnostic: str
) -> None:
    work = _workspace(sandbox, "work")
    code, out, err = run(
        sandbox, "run", str(server.profile), TOOLS[product], "FAIL-TASK", "--cwd", str(work)
    )
    assert code == 1, err
    assert f"dsh: {product}: subagent run failed (stop reason: error)" in err.splitlines()
    assert f"Diagnostic: {diagnostic}" in err.splitlines()
    assert "scripted outage" not in err + out  # the product's error text stays in its logs
    no_traceback(err)
    assert server.others(sandbox) == []


@pytest.mark.keyless
def test_a_held_request_is_answered_after_sigusr1(sandbox: Sandbox, server: Server) -> None:
    work = _workspace(sandbox, "work")
    proc = dsh(
        sandbox, "run", str(server.profile), "subagent_codex", "HOLD-TASK", "--cwd", str(work)
    )
    _wait_for_line(server, "rule 3, step 1/1: hold")
    os.killpg(server.proc.pid, signal.SIGUSR1)
    code, out, err = finish(proc)
    assert code == 0, err
    assert out == "RELEASED\n"
    assert server.proc.poll() is None  # SIGUSR1 releases; it does not stop the server
    assert server.others(sandbox) == []


@pytest.mark.keyless
def test_ctrl_c_of_a_run_held_by_the_model_ends_it_aborted_and_leaves_nothing(
    sandbox: Sandbox, server: Server
) -> None:
    work = _workspace(sandbox, "work")
    proc = dsh(
        sandbox, "run", str(server.profile), "subagent_claude_code", "HOLD-TASK", "--cwd", str(work)
    )
    _wait_for_line(server, "rule 3, step 1/1: hold")
    os.killpg(proc.pid, signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err
    assert "(stop reason: aborted)" in err
    assert server.others(sandbox) == []


def _wait_for_line(server: Server, text: str) -> None:
    """Read the server's stderr until a line ends with ``text`` (the request arrived)."""
    assert server.proc.stderr is not None
    for line in server.proc.stderr:
        if line.rstrip().endswith(text):
            return
    pytest.fail(f"the server ended before {text!r}")


def test_ctrl_c_stops_the_server_removes_what_it_made_and_leaves_nothing(
    sandbox: Sandbox,
) -> None:
    _env(sandbox)
    proc = dsh(sandbox, "model", "serve", str(_script(sandbox)))
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(6)]
    [profile_line] = [line for line in lines if line.startswith("profile: ")]
    profile = Path(profile_line.removeprefix("profile: ").strip())
    urls = [line.split()[-1] for line in lines if "http://" in line]
    assert [urlsplit(url).hostname for url in urls] == ["127.0.0.1", "127.0.0.1"]
    assert profile.is_file()
    assert profile.parent.name.startswith("dsh-model-")
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 0, err
    assert out.endswith("dsh model: stopped\n")
    no_traceback(err)
    assert not profile.parent.exists()  # the temporary directory went with it
    for url in urls:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((urlsplit(url).hostname, urlsplit(url).port), timeout=5)
    assert leftovers(sandbox) == []


def test_sigterm_stops_the_server_and_keeps_dir_without_the_profile(
    sandbox: Sandbox, server: Server
) -> None:
    code, _, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    assert not server.profile.exists()  # it exists exactly while the model serves
    assert (server.directory / "codex" / "codex-home" / "config.toml").is_file()
    assert leftovers(sandbox) == []


def test_a_bad_script_is_one_line_exit_2_and_starts_nothing(sandbox: Sandbox) -> None:
    bad = _script(sandbox, '[[rules]]\nsteps = [{ run = "ls" }, { write = "x" }]\n')
    directory = sandbox.root / "never"
    code, out, err = run(sandbox, "model", "serve", str(bad), "--dir", str(directory))
    assert code == 2
    assert out == ""
    assert err == (
        f"dsh: error: {bad}: rules[0].steps[1].content: required field is missing; "
        "nothing started\n"
    )
    assert not directory.exists()
    assert leftovers(sandbox) == []


def test_a_dir_that_is_not_empty_is_exit_2_and_starts_nothing(sandbox: Sandbox) -> None:
    directory = sandbox.root / "busy"
    directory.mkdir()
    (directory / "mine.txt").write_text("mine", encoding="utf-8")
    code, _, err = run(sandbox, "model", "serve", str(_script(sandbox)), "--dir", str(directory))
    assert code == 2
    assert err == f"dsh: error: --dir {directory}: not a new or empty directory; nothing started\n"
    assert sorted(p.name for p in directory.iterdir()) == ["mine.txt"]


def test_the_help_names_the_tools_the_kit_binds(sandbox: Sandbox) -> None:
    """The help is written without importing the kit (an extra): its names must agree."""
    code, out, err = run(sandbox, "model", "serve", "--help")
    assert code == 0, err
    words = " ".join(out.split())  # argparse wraps the description
    for tool in (
        keyless_profile.CODEX_TOOL,
        keyless_profile.CLAUDE_TOOL,
        keyless_profile.CODEX_ACP_TOOL,
    ):
        assert f"{tool} " in words or f"{tool}," in words, tool


def test_model_check_lists_the_rules_and_starts_nothing(sandbox: Sandbox) -> None:
    code, out, err = run(sandbox, "model", "check", str(_script(sandbox)))
    assert code == 0, err
    assert out.splitlines() == [
        f"{sandbox.root / 'model.toml'}: 4 rule(s)",
        "  rule 1: tasks containing 'EDIT-TASK': run, write, answer",
        "  rule 2: tasks containing 'FAIL-TASK': error",
        "  rule 3: tasks containing 'HOLD-TASK': hold",
        "  rule 4: any task: answer",
    ]


def test_the_profile_composes_with_both_tools_and_the_job_tools(
    sandbox: Sandbox, server: Server
) -> None:
    code, out, err = run(sandbox, "check", str(server.profile))
    assert code == 0, err
    assert "  subagent_codex -> codex (background: one-shot)" in out.splitlines()
    assert "  subagent_claude_code -> claude-code (background: one-shot)" in out.splitlines()
    assert "product processes started: 0" in out.splitlines()


@pytest.mark.keyless
def test_an_mcp_client_gets_the_scripted_edits_through_dsh_mcp(
    sandbox: Sandbox, server: Server
) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    work = _workspace(sandbox, "work")
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", str(server.profile), "--workspace", str(work)],
        env=sandbox.env,
        cwd=str(sandbox.root),
    )

    async def calls() -> list[tuple[str, bool]]:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            answers = []
            for tool in TOOLS.values():
                result = await session.call_tool(
                    tool, {"description": "edit", "prompt": "EDIT-TASK"}
                )
                [content] = result.content
                answers.append((getattr(content, "text", ""), result.is_error))
            return answers

    answers = anyio.run(calls)
    # The profile keeps sessions, so each answer names the continuation to follow up.
    assert [(text.split("\n")[0], error) for text, error in answers] == [("EDITED", False)] * 2
    assert all("[continuation id: c-" in text for text, _ in answers), answers
    assert (work / "edited.txt").read_text(encoding="utf-8") == CONTENT
    assert server.others(sandbox) == []


@pytest.mark.keyless
@pytest.mark.parametrize("product", ["codex", "claude-code"])
def test_ctrl_c_of_the_server_while_a_run_is_held_ends_that_run_and_leaves_nothing(
    sandbox: Sandbox, server: Server, product: str
) -> None:
    work = _workspace(sandbox, "work")
    proc = dsh(sandbox, "run", str(server.profile), TOOLS[product], "HOLD-TASK", "--cwd", str(work))
    _wait_for_line(server, "rule 3, step 1/1: hold")
    code, out, err = server.stop()
    assert code == 0, err
    assert out.endswith("dsh model: stopped\n")
    code, out, err = finish(proc)
    assert code == 1, err  # the model went away: the product's error, never the then answer
    assert "RELEASED" not in out
    assert f"dsh: {product}: subagent run failed (stop reason: error)" in err.splitlines()
    assert leftovers(sandbox) == []


@pytest.mark.keyless
def test_codex_acp_is_bound_on_the_same_responses_wire(sandbox: Sandbox) -> None:
    from acp_agent import codex_acp_or_skip

    _env(sandbox)
    directory = sandbox.root / "model"
    proc = dsh(
        sandbox,
        "model",
        "serve",
        str(_script(sandbox)),
        "--dir",
        str(directory),
        "--codex-acp",
        codex_acp_or_skip(),
    )
    served = Server(proc, directory, directory / "profile.toml")
    wait_for_file(served.profile, proc)
    work = _workspace(sandbox, "work")
    code, out, err = run(
        sandbox, "run", str(served.profile), "subagent_codex_acp", "EDIT-TASK", "--cwd", str(work)
    )
    assert code == 0, err
    assert out == "EDITED\n"
    assert (work / "edited.txt").read_text(encoding="utf-8") == CONTENT
    assert served.others(sandbox) == []
    code, _, log = served.stop()
    assert code == 0, log
    assert "dsh model: Responses: rule 1, step 3/3: answer" in log.splitlines()
    assert leftovers(sandbox) == []


def test_a_codex_acp_that_is_not_an_executable_is_exit_2_and_starts_nothing(
    sandbox: Sandbox,
) -> None:
    directory = sandbox.root / "never"
    missing = str(sandbox.root / "no-such-codex-acp")
    code, _, err = run(
        sandbox,
        "model",
        "serve",
        str(_script(sandbox)),
        "--dir",
        str(directory),
        "--codex-acp",
        missing,
    )
    assert code == 2
    assert err == f"dsh: error: --codex-acp {missing}: not an executable; nothing started\n"
    assert not directory.exists()
