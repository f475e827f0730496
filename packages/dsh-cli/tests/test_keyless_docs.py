"""docs/keyless.md runs as written: every ``<!-- ci: NAME -->`` block, in a terminal.

The bash blocks are pasted into ``bash -euo pipefail`` with the venv's ``dsh`` first on
``PATH``, in a sandbox (temporary HOME, CODEX_HOME, CLAUDE_CONFIG_DIR, TMPDIR, a private
git configuration); the server block runs in the background as a second terminal would.
The real Codex and Claude Code answer through the scripted model. The Python block runs
as a user's script (``python example.py``) with the same environment.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_sandbox import Sandbox, no_traceback, wait_for_file
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES
from dsh_worktree.testing import private_git_env

PAGE = Path(__file__).resolve().parents[3] / "docs" / "keyless.md"
TEXT = PAGE.read_text(encoding="utf-8")
BIN = str(Path(sys.executable).parent)

pytestmark = pytest.mark.keyless


def block(name: str, language: str = "bash") -> str:
    """The ``language`` block following ``<!-- ci: name -->``."""
    marked = rf"^<!-- ci: {re.escape(name)} -->\n```{language}\n(.*?)^```"
    found = re.search(marked, TEXT, re.S | re.M)
    assert found is not None, f"docs/keyless.md has no {language} block marked ci: {name}"
    return textwrap.dedent(found.group(1))


def shown(after: str) -> list[str]:
    """The lines of the first ``text`` block after the words ``after`` on the page."""
    rest = TEXT[TEXT.index(after) :]
    found = re.search(r"```text\n(.*?)```", rest, re.S)
    assert found is not None
    return found.group(1).splitlines()


def _env(box: Sandbox) -> dict[str, str]:
    env = dict(box.env)
    for name in AMBIENT_MODEL_VARIABLES:
        env.pop(name, None)
    env.update(private_git_env(box.root / "git-home"))
    env["PATH"] = os.pathsep.join([BIN, env.get("PATH", "")])
    return env


def bash(box: Sandbox, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block(name)],
        cwd=box.root,
        env=_env(box),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_marked_block_is_run_here() -> None:
    names = re.findall(r"^<!-- ci: ([a-z-]+) -->$", TEXT, re.M)
    assert names == ["script", "serve", "run", "follow-up", "batch-worktree", "in-ci", "python"]


def test_the_guide_runs_as_written(sandbox: Sandbox) -> None:
    made = bash(sandbox, "script")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[0] == "model.toml: 3 rule(s)"
    server = subprocess.Popen(  # noqa: TID251 - the user's second terminal, not a product
        ["bash", "-euo", "pipefail", "-c", block("serve")],
        cwd=sandbox.root,
        env=_env(sandbox),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_file(sandbox.root / "model" / "profile.toml", server)
        ran = bash(sandbox, "run")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [
            "Wrote greeting.txt.",
            "Wrote greeting.txt.",
            "Hello from the scripted model.",
            "exit status 1",
        ]
        for line in shown("outage run ends"):
            assert line in ran.stderr.splitlines()
        follow = bash(sandbox, "follow-up")
        assert follow.returncode == 0, follow.stderr
        assert follow.stdout == "Nothing to do.\n"
        first = json.loads((sandbox.root / "first.json").read_text(encoding="utf-8"))
        assert first["answer"] == "Wrote greeting.txt."
        batch = bash(sandbox, "batch-worktree")
        assert batch.returncode == 0, batch.stderr
        assert len(batch.stdout.split()) == 2, batch.stdout  # two dsh/ branches
        records = {
            r["id"]: r
            for r in map(json.loads, (sandbox.root / "results.jsonl").read_text().splitlines())
        }
        assert {key: r["stop_reason"] for key, r in records.items()} == dict.fromkeys(
            ["one", "two", "three"], "completed"
        )
        assert records["three"]["changes"]["commit"] is None
        branches = sorted(records[key]["changes"]["branch"] for key in ("one", "two"))
        assert sorted(batch.stdout.split()) == branches
    finally:
        os.killpg(server.pid, signal.SIGINT)
        out, err = server.communicate(timeout=120)
    assert server.returncode == 0, err
    printed = [_normal(line, sandbox.root) for line in out.splitlines()]
    page = [_normal(line, Path("/home/you")) for line in shown("It runs in the foreground")]
    assert printed == [*page, "dsh model: stopped"]
    no_traceback(err)
    assert not (sandbox.root / "model" / "profile.toml").exists()


def _normal(line: str, home: Path) -> str:
    """The line without what differs from run to run: ports, pids, the directory."""
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)
    line = re.sub(r"(-TERM|-USR1) \d+", r"\1 PID", line)
    return line.replace(str(home), "HOME")


def test_the_ci_step_runs_as_written(sandbox: Sandbox) -> None:
    assert bash(sandbox, "script").returncode == 0
    done = bash(sandbox, "in-ci")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["Wrote greeting.txt."]
    log = (sandbox.root / "model.log").read_text(encoding="utf-8").splitlines()
    assert log[-1] == "dsh model: stopped"


def test_the_bad_script_line_shown_is_what_dsh_says(sandbox: Sandbox) -> None:
    (sandbox.root / "model.toml").write_text(
        '[[rules]]\nsteps = [{ run = "ls" }, { write = "x" }, { answer = "a" }]\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        ["dsh", "model", "serve", "model.toml"],
        cwd=sandbox.root,
        env=_env(sandbox),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == shown("A bad script is one line")


def test_the_python_example_runs_as_written(sandbox: Sandbox) -> None:
    """The kit's serve_keyless_profile, with the real Codex answering through its profile."""
    assert bash(sandbox, "script").returncode == 0
    (sandbox.root / "example.py").write_text(block("python", "python"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=sandbox.root,
        env=_env(sandbox),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown("It prints the scripted answer")
    no_traceback(done.stderr)
    # The temporary directory of the profile and the products' homes went with the block.
    assert list(Path(sandbox.env["TMPDIR"]).iterdir()) == []
