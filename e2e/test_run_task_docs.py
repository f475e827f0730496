"""The ``run_task`` example of docs/harness.md ("Run one task from Python like `dsh run`"),
run verbatim as a user's script.

The block is taken from the page and run by this environment's Python in a directory
laid out as the page says (``profile.toml`` with a ``subagent_codex`` tool, a
``README.md``); the product is the REAL Codex against the loopback model fixture. Every
process of the run carries a marker in its environment and this process is a child
subreaper, so the accounting sees what the script left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from doc_examples import marked, python_block, write_codex_profile
from dsh_contract_tests.fixtures import responses
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies

pytestmark = pytest.mark.keyless

PAGE = Path(__file__).resolve().parents[1] / "docs" / "harness.md"
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_RUN_TASK_DOCS_TESTS"


def python_example() -> str:
    """The one Python block of the page's ``run_task`` section."""
    return python_block(PAGE, "## Run one task from Python like `dsh run`")


def _run_example(
    tmp_path: Path, model: responses.ResponsesFixture
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "w"
    work.mkdir()
    (work / "README.md").write_text("# A project\nIt does one thing.\n", encoding="utf-8")
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "TMPDIR"):
        (tmp_path / name.lower()).mkdir()
        env[name] = str(tmp_path / name.lower())
    env[MARKER_NAME] = marker
    write_codex_profile(work / "profile.toml", tmp_path, model.base_url)
    try:
        done = subprocess.run(
            [sys.executable, "-c", python_example()],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        left = marked(MARKER_NAME, marker)
    finally:
        for proc in marked(MARKER_NAME, marker):
            proc.kill()
        reap_adopted_zombies()
    assert left == [], f"left behind: {[proc.name() for proc in left]}"
    return done


def test_the_example_prints_the_json_record_and_exits_like_dsh_run(tmp_path: Path) -> None:
    become_subreaper()
    answer = responses.PlainAnswer("A project that does one thing.", "final_answer")
    with responses.ResponsesFixture([answer]) as model:
        done = _run_example(tmp_path, model)
        requests = model.requests
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr == ""  # the library printed nothing behind the script's back
    (line,) = done.stdout.splitlines()
    record = json.loads(line)
    assert record["answer"] == "A project that does one thing."
    assert record["stop_reason"] == "completed"
    assert record["elapsed_seconds"] > 0
    assert set(record) == {
        "answer",
        "stop_reason",
        "diagnostic",
        "usage",
        "changes",
        "elapsed_seconds",
        "continuation",
    }
    assert "Summarise README.md in one sentence." in json.dumps(requests[-1].body)


def test_a_failed_run_exits_with_dsh_runs_status(tmp_path: Path) -> None:
    become_subreaper()
    with responses.ResponsesFixture([responses.HttpError(400)]) as model:
        done = _run_example(tmp_path, model)
    assert done.returncode == 1, done.stderr[-4000:]  # stop reason error
    record = json.loads(done.stdout.splitlines()[-1])
    assert record["stop_reason"] == "error"
    assert record["diagnostic"]
