"""Worktree isolation against real git, the REAL Codex and the REAL Claude Code (keyless).

The loopback model fixtures script each product to edit files through its own tools
(Codex's shell tool, Claude Code's Bash tool): every task's first model request gets a
tool call that writes ``shared.txt`` with the task's own line, the request that carries
the tool's output gets the final answer. Tasks are routed by the ``WT-TASK <id>`` marker
in their text, so several run at once. The repository's main tree carries its own
uncommitted, staged and stashed changes, which must never move.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import psutil
import pytest
from acp_agent import codex_acp_or_skip
from dsh_cli.cli import main
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES
from dsh_subagent import ABORTED, COMPLETED, CancelController, delegate
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import SpawnSpec, spawn
from dsh_subprocess.testing import ProcessWatch, wait_gone
from dsh_worktree import Worktree
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
HOST = str(Path(__file__).with_name("worktree_host.py"))
MARKER = re.compile(r"WT-TASK ([a-z0-9-]+)")
READ_ONLY = re.compile(r"WT-READ ([a-z0-9-]+)")  # answered at once, no tool call
DEADLINE = 120.0  # a failure bound for a loaded machine, never a timing

Product = Literal["codex", "claude-code"]


def task_text(task_id: str) -> str:
    return f"WT-TASK {task_id}: write your line into shared.txt, then say done."


def line_for(task_id: str) -> str:
    return f"version {task_id}"


def command_for(task_id: str) -> str:
    # A follow-up ("append-..." ids) adds its line to what the earlier run wrote.
    into = ">>" if task_id.startswith("append") else ">"
    return f"printf '{line_for(task_id)}\\n' {into} shared.txt"


def _current_task(text: str) -> str | None:
    """The task a request is for: the last marker (a follow-up's request also carries the
    earlier turn, whose marker comes first)."""
    found = MARKER.findall(text)
    return found[-1] if found else None


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@dataclass
class Router:
    """Tool call first, answer once the tool's output came back; ``hold`` ids then hold."""

    hold: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: list[str] = field(default_factory=list)

    def codex(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        read_only = READ_ONLY.search(json.dumps(request.body))
        if read_only is not None:
            with self.lock:
                self.answered.append(read_only.group(1))
            return responses.PlainAnswer(f"READ-{read_only.group(1)}", "final_answer")
        task_id = _current_task(json.dumps(request.body))
        if task_id is None:
            return None
        if f"call_{task_id}" not in json.dumps(request.body):
            command = command_for(task_id)
            return responses.FunctionCall(
                (
                    ("exec_command", {"cmd": command}),
                    ("shell_command", {"command": command}),
                    ("shell", {"command": ["/bin/sh", "-c", command]}),
                ),
                call_id=f"call_{task_id}",
            )
        if task_id in self.hold:
            return responses.Hold()
        with self.lock:
            self.answered.append(task_id)
        return responses.PlainAnswer(f"EDITED-{task_id}", "final_answer")

    def claude(self, request: messages.RecordedRequest) -> messages.Behaviour | None:
        text = json.dumps(request.body)
        task_id = _current_task(text)
        if task_id is None:
            return None
        if f"toolu_{task_id}" not in text:
            return messages.ToolUse("Bash", {"command": command_for(task_id)}, f"toolu_{task_id}")
        if task_id in self.hold:
            return messages.Hold()
        with self.lock:
            self.answered.append(task_id)
        return messages.TextAnswer(f"EDITED-{task_id}")


@dataclass
class Setup:
    root: Path
    repo: Path
    router: Router
    codex_model: responses.ResponsesFixture
    claude_model: messages.MessagesFixture
    codex_config: dict[str, Any]
    claude_config: dict[str, Any]
    env: dict[str, str]

    def profile(self, *, isolated: bool) -> Path:
        worktree = "\n[providers.worktree]\n" if isolated else ""
        sections = [
            '[[providers]]\ntype = "codex"\nprovider_name = "codex-keyless"',
            _table("providers.config", self.codex_config, skip="env"),
            _table("providers.config.env", self.codex_config["env"]) + worktree,
            '[[providers]]\ntype = "claude-code"\nprovider_name = "claude-keyless"',
            _table("providers.config", self.claude_config, skip="env"),
            _table("providers.config.env", self.claude_config["env"]) + worktree,
            '[[tools]]\nname = "subagent_codex"\nprovider = "codex-keyless"\n'
            'background_mode = "disabled"',
            '[[tools]]\nname = "subagent_claude_code"\nprovider = "claude-keyless"\n'
            'background_mode = "disabled"',
        ]
        path = self.root / ("isolated.toml" if isolated else "profile.toml")
        path.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
        return path

    def tool_rows_profile(self) -> Path:
        """One Codex provider row, not isolated; two tool rows bound to it, the second
        isolated by its own ``[tools.worktree]`` table."""
        sections = [
            '[[providers]]\ntype = "codex"\nprovider_name = "codex-keyless"',
            _table("providers.config", self.codex_config, skip="env"),
            _table("providers.config.env", self.codex_config["env"]),
            '[[tools]]\nname = "subagent_codex"\nprovider = "codex-keyless"\n'
            'background_mode = "disabled"',
            '[[tools]]\nname = "subagent_codex_isolated"\nprovider = "codex-keyless"\n'
            'background_mode = "disabled"\n[tools.worktree]\nbranch = "iso/{id}"',
        ]
        path = self.root / "tool-rows.toml"
        path.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
        return path

    def main_state(self) -> tuple[str, ...]:
        return (
            git(self.repo, "status", "--porcelain", "--untracked-files=all"),
            git(self.repo, "diff"),
            git(self.repo, "diff", "--cached"),
            git(self.repo, "stash", "list"),
            git(self.repo, "rev-parse", "HEAD"),
        )

    def worktrees(self) -> list[str]:
        listed = git(self.repo, "worktree", "list", "--porcelain").splitlines()
        return [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]


def _table(name: str, values: dict[str, Any], skip: str = "") -> str:
    lines = [f"[{name}]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in values.items() if k != skip and v is not None]
    return "\n".join(lines)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test\n\temail = test@example.invalid\n[init]\n\tdefaultBranch = main\n",
        encoding="utf-8",
    )
    git_env = {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for name, value in git_env.items():
        monkeypatch.setenv(name, value)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet")
    (repo / "shared.txt").write_text("original\n", encoding="utf-8")
    (repo / "other.txt").write_text("other\n", encoding="utf-8")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "initial")
    # The main tree's own work in progress: a stash, a staged file, an uncommitted edit.
    (repo / "shared.txt").write_text("stashed\n", encoding="utf-8")
    git(repo, "stash", "--quiet")
    (repo / "staged.txt").write_text("staged\n", encoding="utf-8")
    git(repo, "add", "staged.txt")
    (repo / "other.txt").write_text("uncommitted\n", encoding="utf-8")
    router = Router()
    with (
        responses.ResponsesFixture(route=router.codex) as codex_model,
        messages.MessagesFixture(
            default=messages.TextAnswer("unrouted"), route=router.claude
        ) as claude_model,
    ):
        codex_env = responses.codex_keyless_env(tmp_path / "codex")
        responses.write_codex_config(
            codex_env["CODEX_HOME"], codex_model.base_url, sandbox_mode="danger-full-access"
        )
        claude_home = messages.keyless_claude_home(tmp_path / "claude", claude_model.base_url)
        claude_env: dict[str, str | None] = dict(claude_home.env)
        if os.geteuid() == 0:  # the CLI refuses the bypass as root outside a sandbox
            claude_env["IS_SANDBOX"] = "1"
        yield Setup(
            tmp_path,
            repo,
            router,
            codex_model,
            claude_model,
            {
                "env": codex_env,
                "permission_mode": "dangerously-bypass-approvals-and-sandbox",
                "dispose_grace": 2.0,
            },
            {"env": claude_env, "permission_mode": "bypassPermissions", "dispose_grace": 2.0},
            {
                **git_env,
                "NO_PROXY": "127.0.0.1,localhost",
                "HTTP_PROXY": "",
                "HTTPS_PROXY": "",
                "ALL_PROXY": "",
            },
        )


def _assert_branches(
    setup: Setup, changes: dict[str, dict[str, Any]], before: tuple[str, ...]
) -> None:
    base = before[-1]
    for task_id, change in changes.items():
        assert change["base"] == base
        assert change["commit"] is not None, task_id
        assert git(setup.repo, "rev-parse", change["branch"]) == change["commit"]
        assert git(setup.repo, "show", f"{change['commit']}:shared.txt") == line_for(task_id)
        names = git(setup.repo, "diff", "--name-only", base, change["commit"])
        assert names == "shared.txt", task_id
        assert (change["files_changed"], change["insertions"], change["deletions"]) == (1, 1, 1)
    assert len({change["branch"] for change in changes.values()}) == len(changes)
    assert setup.main_state() == before
    assert setup.worktrees() == [str(setup.repo)]


@pytest.mark.parametrize(
    ("product", "tool"), [("codex", "subagent_codex"), ("claude-code", "subagent_claude_code")]
)
def test_a_batch_of_four_parallel_edits_lands_on_four_branches(
    setup: Setup, product: Product, tool: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ["one", "two", "three", "four"]
    tasks = setup.root / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": i, "task": task_text(i)}) + "\n" for i in ids), encoding="utf-8"
    )
    out = setup.root / "results.jsonl"
    before = setup.main_state()
    with ProcessWatch() as watch:
        code = main(
            [
                "batch",
                str(setup.profile(isolated=False)),
                tool,
                str(tasks),
                "--out",
                str(out),
                "--cwd",
                str(setup.repo),
                "--concurrency",
                "4",
                "--worktree",
            ]
        )
        err = capsys.readouterr().err
        assert code == 0, err
        assert watch.alive() == []
    records = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert {i: r["answer"] for i, r in records.items()} == {i: f"EDITED-{i}" for i in ids}
    assert sorted(setup.router.answered) == sorted(ids)
    _assert_branches(setup, {i: r["changes"] for i, r in records.items()}, before)
    assert {"codex" if product == "codex" else "claude"} <= {p.name for p in watch.seen}


def test_a_sequential_batch_reuses_one_warm_worktree_and_each_task_sees_it_fresh(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    # --concurrency 1: one worktree, checked out once, reset between the four tasks. Each
    # task's branch holds exactly its own edit: nothing the previous task wrote leaked.
    ids = ["w1", "w2", "w3", "w4"]
    tasks = setup.root / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": i, "task": task_text(i)}) + "\n" for i in ids), encoding="utf-8"
    )
    out = setup.root / "results.jsonl"
    before = setup.main_state()
    with ProcessWatch() as watch:
        code = main(
            [
                "batch", str(setup.profile(isolated=False)), "subagent_codex", str(tasks),
                "--out", str(out), "--cwd", str(setup.repo), "--concurrency", "1", "--worktree",
            ]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert code == 0, err
        assert watch.alive() == []
    records = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert {i: r["answer"] for i, r in records.items()} == {i: f"EDITED-{i}" for i in ids}
    _assert_branches(setup, {i: r["changes"] for i, r in records.items()}, before)
    # Every Codex request names the directory it works in: one worktree for all four.
    cache = str(setup.root / "home" / ".cache" / "dsh" / "worktrees")
    cwds = {
        found
        for request in setup.codex_model.requests
        for found in re.findall(
            re.escape(cache) + r"/[^/\"<\\]+/[0-9a-f]{12}", json.dumps(request.body)
        )
    }
    assert len(cwds) == 1, cwds


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_concurrent_mcp_calls_edit_in_their_own_worktrees(setup: Setup) -> None:
    before = setup.main_state()
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", str(setup.profile(isolated=True)), "--workspace", str(setup.repo)],
        env=setup.env,
        cwd=str(setup.root),
    )
    results: dict[str, Any] = {}
    with ProcessWatch() as watch:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()

            async def call(task_id: str, tool: str) -> None:
                results[task_id] = await session.call_tool(
                    tool, {"description": task_id, "prompt": task_text(task_id)}
                )

            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as group:
                    group.start_soon(call, "mcp-codex", "subagent_codex")
                    group.start_soon(call, "mcp-claude", "subagent_claude_code")
        assert await anyio.to_thread.run_sync(watch.wait_gone, 10.0) == []
    changes = {}
    for task_id, result in results.items():
        assert result.is_error is False, result.content
        structured = result.structured_content
        assert structured is not None
        assert structured["stop_reason"] == COMPLETED
        change = structured["changes"]
        assert structured["text"] == (
            f"EDITED-{task_id}\nChanges: committed on branch {change['branch']} (1 files "
            f"changed, 1 insertions(+), 1 deletions(-)), commit {change['commit'][:12]}"
        )
        changes[task_id] = change
    _assert_branches(setup, changes, before)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_honours_a_tool_rows_own_isolation(setup: Setup) -> None:
    # Two tool rows of one provider row: only the one whose row sets [tools.worktree]
    # works in a worktree and makes a branch; the other runs in the workspace itself
    # (its task reads only, so the main tree must stay exactly as it was).
    before = setup.main_state()
    branches_before = git(setup.repo, "branch", "--format=%(refname:short)").split()
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", str(setup.tool_rows_profile()), "--workspace", str(setup.repo)],
        env=setup.env,
        cwd=str(setup.root),
    )
    results: dict[str, Any] = {}
    with ProcessWatch() as watch:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()

            async def call(tool: str, prompt: str) -> None:
                results[tool] = await session.call_tool(
                    tool, {"description": tool, "prompt": prompt}
                )

            with anyio.fail_after(DEADLINE):
                async with anyio.create_task_group() as group:
                    group.start_soon(call, "subagent_codex_isolated", task_text("mcp-iso"))
                    group.start_soon(
                        call, "subagent_codex", "WT-READ mcp-plain: answer, change nothing."
                    )
        assert await anyio.to_thread.run_sync(watch.wait_gone, 10.0) == []
        assert "codex" in {p.name for p in watch.seen}
    assert {tool.name for tool in listed.tools} == {"subagent_codex", "subagent_codex_isolated"}
    isolated = results["subagent_codex_isolated"]
    plain = results["subagent_codex"]
    assert isolated.is_error is False, isolated.content
    assert plain.is_error is False, plain.content
    assert isolated.structured_content is not None
    assert plain.structured_content is not None
    assert plain.structured_content["stop_reason"] == COMPLETED
    assert plain.structured_content["changes"] is None
    assert plain.structured_content["text"] == "READ-mcp-plain"
    assert isolated.structured_content["stop_reason"] == COMPLETED
    change = isolated.structured_content["changes"]
    assert change["branch"].startswith("iso/")
    assert isolated.structured_content["text"] == (
        f"EDITED-mcp-iso\nChanges: committed on branch {change['branch']} (1 files "
        f"changed, 1 insertions(+), 1 deletions(-)), commit {change['commit'][:12]}"
    )
    _assert_branches(setup, {"mcp-iso": change}, before)  # main tree, index, stash untouched
    branches = git(setup.repo, "branch", "--format=%(refname:short)").split()
    assert sorted(branches) == sorted([*branches_before, change["branch"]])
    assert sorted(setup.router.answered) == ["mcp-iso", "mcp-plain"]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _codex(setup: Setup) -> CodexProvider:
    return CodexProvider(CodexConfig(**setup.codex_config))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancelled_real_codex_run_keeps_what_it_wrote(setup: Setup) -> None:
    setup.router.hold.add("cancelled")
    before = setup.main_state()
    cancel = CancelController()
    with ProcessWatch() as watch:
        async with anyio.create_task_group() as group:

            async def cancel_when_held() -> None:
                # The second model request holds: the tool ran and wrote its line.
                await anyio.to_thread.run_sync(setup.codex_model.wait_for_hold, DEADLINE)
                cancel.cancel("test")

            group.start_soon(cancel_when_held)
            with anyio.fail_after(DEADLINE):
                result = await delegate(
                    _codex(setup),
                    task_text("cancelled"),
                    cwd=setup.repo,
                    cancel=cancel.signal,
                    isolation=Worktree(),
                )
        assert watch.alive() == []
    assert result.stop_reason == ABORTED
    assert result.changes is not None
    change = result.changes.model_dump()
    _assert_branches(setup, {"cancelled": change}, before)
    subject = git(setup.repo, "log", "-1", "--format=%s", change["commit"])
    assert subject.endswith("(aborted)")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_host_sigkilled_mid_run_is_recovered_by_the_next_run(setup: Setup) -> None:
    setup.router.hold.add("killed")
    before = setup.main_state()
    ready = setup.root / "host-ready.json"
    spec = setup.root / "host-spec.json"
    spec.write_text(
        json.dumps(
            {
                "config": setup.codex_config,
                "repo": str(setup.repo),
                "ready": str(ready),
                "task": task_text("killed"),
            }
        ),
        encoding="utf-8",
    )
    # Unguarded: the host's own death is what is being tested.
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, HOST, str(spec)),
            cwd=str(setup.root),
            stdin="devnull",
            stdout="devnull",
            host_death_guard=False,
            grace=0.5,
        )
    )
    try:
        with anyio.fail_after(DEADLINE):
            while not ready.exists() and host.exit_facts is None:  # noqa: ASYNC110 - written by another process
                await anyio.sleep(0.02)
        assert host.exit_facts is None
        await anyio.to_thread.run_sync(setup.codex_model.wait_for_hold, DEADLINE)
        tree = psutil.Process(host.pid).children(recursive=True)
        os.kill(host.pid, signal.SIGKILL)
        await host.wait()
        survivors = await anyio.to_thread.run_sync(wait_gone, tree, DEADLINE)
    finally:
        await host.terminate()
    assert survivors == []
    (left,) = [path for path in setup.worktrees() if path != str(setup.repo)]
    assert _read(Path(left, "shared.txt")) == line_for("killed") + "\n"
    listed = await anyio.to_thread.run_sync(
        functools.partial(
            subprocess.run,
            [str(DSH), "worktrees", "list", str(setup.repo)],
            capture_output=True,
            text=True,
            env={**os.environ, **setup.env},
        )
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("abandoned ")
    branch = listed.stdout.split()[1]

    # The next isolated run on the repository recovers the abandoned worktree first.
    with ProcessWatch() as watch:
        with anyio.fail_after(DEADLINE):
            result = await delegate(
                _codex(setup), task_text("next"), cwd=setup.repo, isolation=Worktree()
            )
        assert watch.alive() == []
    assert result.stop_reason == COMPLETED
    assert result.changes is not None
    recovered = git(setup.repo, "rev-parse", branch)
    assert git(setup.repo, "log", "-1", "--format=%s", recovered).endswith("(abandoned)")
    _assert_branches(
        setup,
        {
            "killed": {
                "branch": branch,
                "commit": recovered,
                "base": before[-1],
                "files_changed": 1,
                "insertions": 1,
                "deletions": 1,
            },
            "next": result.changes.model_dump(),
        },
        before,
    )


@pytest.mark.parametrize(
    ("case", "line"),
    [
        ("no-repo", "dsh: error: worktree: the cwd is not inside a git repository: "),
        ("bare", "dsh: error: worktree: the cwd is in a bare repository (no working tree): "),
        ("unknown-base", "dsh: error: worktree: the base ref 'no-such-ref' does not name a commit"),
        ("existing-branch", "dsh: error: worktree: the branch 'taken' already exists"),
    ],
)
def test_bad_input_on_the_real_dsh_exits_2_before_anything_starts(
    setup: Setup, case: str, line: str
) -> None:
    cwd, extra = setup.repo, []
    if case == "no-repo":
        cwd = setup.root / "plain"
        cwd.mkdir()
    elif case == "bare":
        cwd = setup.root / "bare.git"
        git(setup.root, "init", "--quiet", "--bare", str(cwd))
    elif case == "unknown-base":
        extra = ["--worktree-base", "no-such-ref"]
    else:
        git(setup.repo, "branch", "taken")
        extra = ["--worktree-branch", "taken"]
    branches = git(setup.repo, "branch", "--list")
    with ProcessWatch() as watch:
        done = subprocess.run(
            [
                str(DSH),
                "run",
                str(setup.profile(isolated=False)),
                "subagent_codex",
                task_text("refused"),
                "--cwd",
                str(cwd),
                "--worktree",
                *extra,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **setup.env},
            timeout=DEADLINE,
        )
        assert {p.name for p in watch.seen} <= {"dsh", "git", "python", "python3"}
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert setup.codex_model.requests == ()
    assert git(setup.repo, "branch", "--list") == branches
    assert setup.worktrees() == [str(setup.repo)]
    assert not (setup.root / "home" / ".cache" / "dsh").exists()


def _follow_up_on_the_first_branch(setup: Setup, profile: str, tool: str) -> None:
    """The real dsh, twice: a run, then its follow-up (``--resume``), which must work on
    the first run's branch (a new worktree at the first run's directory) and commit onto
    it."""
    before = setup.main_state()
    env = {**os.environ, **setup.env}

    def dsh(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(DSH), "run", profile, tool, *argv, "--cwd", str(setup.repo), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEADLINE,
        )

    with ProcessWatch() as watch:
        first = dsh(task_text("cont1"))
        assert first.returncode == 0, first.stderr
        record = json.loads(first.stdout)
        follow = dsh(task_text("append-cont2"), "--resume", record["continuation"])
        assert follow.returncode == 0, follow.stderr
        alive = watch.alive()
    assert alive == []
    assert record["answer"] == "EDITED-cont1"
    branch, commit = record["changes"]["branch"], record["changes"]["commit"]
    assert git(setup.repo, "show", f"{commit}:shared.txt") == line_for("cont1")
    again = json.loads(follow.stdout)
    assert again["answer"] == "EDITED-append-cont2"
    changes = again["changes"]
    assert (changes["branch"], changes["base"]) == (branch, commit)
    assert git(setup.repo, "rev-parse", branch) == changes["commit"]
    assert git(setup.repo, "rev-parse", f"{branch}^") == commit  # onto the first run's commit
    assert git(setup.repo, "show", f"{branch}:shared.txt") == (
        f"{line_for('cont1')}\n{line_for('append-cont2')}"
    )
    assert setup.main_state() == before
    assert setup.worktrees() == [str(setup.repo)]
    assert git(setup.repo, "branch", "--format=%(refname:short)").split() == [branch, "main"]


def _continued(bodies: list[str]) -> None:
    """The product continued its own session: the follow-up's requests carry the first turn."""
    follow_ups = [body for body in bodies if "WT-TASK append-cont2" in body]
    assert follow_ups
    assert all("WT-TASK cont1" in body for body in follow_ups)


@pytest.mark.parametrize(
    ("product", "tool"), [("codex", "subagent_codex"), ("claude-code", "subagent_claude_code")]
)
def test_a_follow_up_of_an_isolated_run_continues_on_its_branch(
    setup: Setup, product: Product, tool: str
) -> None:
    setup.codex_config["continuation"] = True
    setup.claude_config["continuation"] = True
    _follow_up_on_the_first_branch(setup, str(setup.profile(isolated=True)), tool)
    requests = setup.codex_model.requests if product == "codex" else setup.claude_model.requests()
    _continued([json.dumps(r.body) for r in requests])


def test_an_acp_agents_follow_up_of_an_isolated_run_continues_on_its_branch(
    setup: Setup,
) -> None:
    # The real codex-acp (it advertises loadSession) on the same loopback Responses model.
    command = codex_acp_or_skip()
    env = responses.codex_keyless_env(setup.root / "acp")
    responses.write_codex_config(
        env["CODEX_HOME"],
        setup.codex_model.base_url,
        model="gpt-5.4-mini",  # a slug codex-acp knows
        sandbox_mode="danger-full-access",
    )
    env["RUST_LOG"] = "warn"
    config = {
        "command": command,
        "args": ["-c", "features.shell_snapshot=false"],
        "permission": "allow",
        "continuation": True,
        "dispose_grace": 2.0,
    }
    profile = setup.root / "acp.toml"
    profile.write_text(
        '[[providers]]\ntype = "acp"\nprovider_name = "codex-acp"\n'
        + _table("providers.config", config)
        + "\n"
        + _table("providers.config.env", dict(env))
        + '\n[providers.worktree]\n\n[[tools]]\nname = "subagent_acp"\nprovider = "codex-acp"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    _follow_up_on_the_first_branch(setup, str(profile), "subagent_acp")
    _continued([json.dumps(r.body) for r in setup.codex_model.requests])
