"""``dsh batch`` on this machine against the REAL Codex and Claude Code (keyless tier).

Both products answer through the loopback model fixtures, which route each request by the
``BATCH-TASK <id>`` marker in its task text (several tasks run at once, so a script in
arrival order would not do). Every test proves the products' process trees are gone; the
Ctrl-C test drives the real ``dsh`` executable in a session of its own, as a terminal
would, and counts every process carrying its sandbox's marker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from dsh_cli.cli import main
from dsh_contract_tests.fixtures import messages, responses
from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES, keyless_products
from dsh_subprocess.testing import ProcessWatch

pytestmark = pytest.mark.keyless

DSH = Path(sys.executable).with_name("dsh")
MARKER = re.compile(r"BATCH-TASK ([a-z0-9-]+)")


def answer_for(task_id: str) -> str:
    return f"ANSWER-{task_id.upper()}"


def task_line(task_id: str, **extra: str) -> str:
    task = f"BATCH-TASK {task_id}: reply with your sentinel and nothing else."
    return json.dumps({"id": task_id, "task": task, **extra})


def _marked_id(body: Any) -> str | None:
    found = MARKER.search(json.dumps(body))
    return found.group(1) if found else None


@dataclass
class Router:
    """Answers each task by its id; ``hold`` ids are held, ``fail`` ids get HTTP 500."""

    hold: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _pick(self, body: Any) -> tuple[str, str] | None:
        task_id = _marked_id(body)
        if task_id is None:
            return None
        with self.lock:
            self.seen.append(task_id)
            if task_id in self.hold:
                return task_id, "hold"
        return task_id, "fail" if task_id.startswith("fail") else "answer"

    def codex(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        picked = self._pick(request.body)
        if picked is None:
            return None
        task_id, what = picked
        if what == "hold":
            return responses.Hold()
        if what == "fail":
            return responses.HttpError(500)
        return responses.PlainAnswer(answer_for(task_id), "final_answer")

    def claude(self, request: messages.RecordedRequest) -> messages.Behaviour | None:
        picked = self._pick(request.body)
        if picked is None:
            return None
        task_id, what = picked
        if what == "hold":
            return messages.Hold()
        if what == "fail":
            return messages.HttpError(500)
        return messages.TextAnswer(answer_for(task_id))

    def count(self, task_id: str) -> int:
        with self.lock:
            return self.seen.count(task_id)


@dataclass
class Setup:
    root: Path
    workspace: Path
    profile: Path
    router: Router
    codex_model: responses.ResponsesFixture
    claude_model: messages.MessagesFixture

    def tasks(self, *lines: str) -> Path:
        path = self.root / "tasks.jsonl"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    @property
    def out(self) -> Path:
        return self.root / "results.jsonl"

    def records(self) -> dict[str, dict[str, Any]]:
        lines = self.out.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        by_id = {record["id"]: record for record in records}
        assert len(by_id) == len(records), "one record per task id"
        return by_id


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    for variable in AMBIENT_MODEL_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    router = Router()
    with keyless_products(
        tmp_path,
        claude_answer="unrouted",
        jobs=False,
        codex_route=router.codex,
        claude_route=router.claude,
    ) as running:
        yield Setup(
            tmp_path,
            running.workspace,
            running.profile,
            router,
            running.codex_model,
            running.claude_model,
        )


def _batch(setup: Setup, target: str, tasks: Path, *extra: str) -> list[str]:
    return [
        "batch",
        str(setup.profile),
        target,
        str(tasks),
        "--out",
        str(setup.out),
        "--cwd",
        str(setup.workspace),
        *extra,
    ]


def test_codex_batch_records_each_task_reports_bad_lines_and_resumes(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = setup.tasks(
        task_line("one"),
        "this is not json",
        task_line("two"),
        json.dumps({"id": "no-task"}),
        task_line("one"),  # a duplicate id is a bad line, not a second run
        task_line("fail-three"),
    )
    with ProcessWatch() as watch:
        code = main(_batch(setup, "subagent_codex", tasks, "--concurrency", "2"))
    err = capsys.readouterr().err
    assert code == 1, err  # a failed task and bad lines
    assert f"{tasks} line 2: not valid JSON; skipped" in err
    assert f"{tasks} line 4: field 'task' is missing; skipped" in err
    assert f"{tasks} line 5: duplicate id 'one' (first on line 1); skipped" in err
    assert "dsh: batch: 2 completed, 1 failed, 3 bad lines skipped" in err
    records = setup.records()
    assert set(records) == {"one", "two", "fail-three"}
    for task_id in ("one", "two"):
        assert records[task_id]["stop_reason"] == "completed"
        assert records[task_id]["answer"] == answer_for(task_id)
        assert records[task_id]["diagnostic"] is None
        assert records[task_id]["elapsed_seconds"] > 0
        assert "usage" in records[task_id]
    failed = records["fail-three"]
    assert failed["stop_reason"] == "error"
    assert failed["diagnostic"].startswith("Product subagent failure (product: Codex;")
    assert any(p.name == "codex" for p in watch.seen)
    assert watch.alive() == []

    # Resume: the ids already recorded are skipped, a new line runs.
    with tasks.open("a", encoding="utf-8") as file:
        file.write(task_line("four") + "\n")
    code = main(_batch(setup, "subagent_codex", tasks))
    err = capsys.readouterr().err
    assert code == 1, err  # the bad lines are still there
    assert "dsh: 3 of 4 tasks already in" in err
    assert "dsh: batch: 1 completed, 0 failed, 3 bad lines skipped" in err
    assert setup.records()["four"]["answer"] == answer_for("four")
    assert [setup.router.count(i) for i in ("one", "two", "fail-three", "four")] == [1, 1, 1, 1]


def test_claude_code_batch_runs_tasks_at_once_in_their_own_cwd(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    (setup.workspace / "sub").mkdir()
    tasks = setup.tasks(task_line("alpha"), task_line("beta", cwd="sub"), task_line("gamma"))
    with ProcessWatch() as watch:
        code = main(_batch(setup, "subagent_claude_code", tasks, "--concurrency", "3"))
    err = capsys.readouterr().err
    assert code == 0, err
    assert "dsh: batch: 3 completed, 0 failed; results in" in err
    records = setup.records()
    assert {key: value["answer"] for key, value in records.items()} == {
        task_id: answer_for(task_id) for task_id in ("alpha", "beta", "gamma")
    }
    assert sum(1 for p in watch.seen if p.name == "claude") >= 3
    assert watch.alive() == []


def test_a_task_whose_cwd_is_missing_refuses_the_batch_before_anything_starts(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = setup.tasks(task_line("here"), task_line("nowhere", cwd="no-such-dir-4711"))
    with ProcessWatch() as watch:
        code = main(_batch(setup, "subagent_codex", tasks))
    err = capsys.readouterr().err
    assert code == 2, err
    missing = str(setup.workspace / "no-such-dir-4711")
    assert err == (
        f"dsh: error: {tasks} line 2: task 'nowhere': cwd {missing!r} is not an accessible "
        "directory; nothing started\n"
    )
    assert not setup.out.exists()  # nothing recorded: the fixed command runs both tasks
    assert [setup.router.count(i) for i in ("here", "nowhere")] == [0, 0]
    assert not any(p.name == "codex" for p in watch.seen)


# --- Ctrl-C on the real executable ------------------------------------------------------


def _sandbox_env(root: Path, marker: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "TMPDIR"):
        path = root / f"sandbox-{name.lower()}"
        path.mkdir()
        env[name] = str(path)
    env["PROCESS_MARKER_FOR_DSH_BATCH_TESTS"] = marker
    return env


def _marked(marker: str) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PROCESS_MARKER_FOR_DSH_BATCH_TESTS") == marker:
                alive.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return alive


def _name(proc: psutil.Process) -> str:
    """The process's name, or "" for one that has exited since it was listed."""
    try:
        return proc.name()
    except psutil.Error:
        return ""


# The test plays the user's shell: dsh is started the way a terminal starts it.
_Dsh = subprocess.Popen[str]  # noqa: TID251 - the dsh executable, not a product


def _wait_until(condition: Any, proc: _Dsh, what: str) -> None:
    """Wait for ``condition()`` (the event), failing early if dsh already exited."""
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"dsh exited {proc.returncode} before {what}: {out!r} {err!r}")
        time.sleep(0.02)


def test_ctrl_c_cancels_every_run_exits_130_leaves_nothing_and_the_batch_resumes(
    setup: Setup,
) -> None:
    setup.router.hold.update({"held-a", "held-b"})
    tasks = setup.tasks(task_line("quick"), task_line("held-a"), task_line("held-b"))
    marker = uuid.uuid4().hex
    proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
        [str(DSH), *_batch(setup, "subagent_codex", tasks, "--concurrency", "3")],
        env=_sandbox_env(setup.root, marker),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_until(lambda: setup.codex_model.holding >= 2, proc, "both runs were held")
        _wait_until(
            lambda: setup.out.exists() and "quick" in setup.out.read_text(encoding="utf-8"),
            proc,
            "the quick task was recorded",
        )
        running = [p for p in _marked(marker) if _name(p) == "codex"]
        # The two held runs, and up to min(--concurrency, 4) products kept ready beside
        # them (docs/harness.md, "Ready products"): the interrupt must end them all.
        assert 2 <= len(running) <= 2 + 3, running
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert out == ""
    assert "dsh: SIGINT: cancelling 2 running task(s); waiting for every product to exit" in err
    assert "dsh: batch: 1 completed, 0 failed, 2 not recorded" in err
    assert "run the same command again to resume" in err
    for word in ("Traceback", "ExceptionGroup", "KeyboardInterrupt"):
        assert word not in err
    assert _marked(marker) == []
    # Runs cancelled by the interrupt are not recorded, so resuming runs exactly them.
    assert set(setup.records()) == {"quick"}

    setup.router.hold.clear()
    (setup.root / "again").mkdir()
    code = subprocess.run(
        [str(DSH), *_batch(setup, "subagent_codex", tasks)],
        env=_sandbox_env(setup.root / "again", marker),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert code.returncode == 0, code.stderr
    assert "dsh: 1 of 3 tasks already in" in code.stderr
    records = setup.records()
    assert {key: value["stop_reason"] for key, value in records.items()} == dict.fromkeys(
        ("quick", "held-a", "held-b"), "completed"
    )
    assert [setup.router.count(i) for i in ("quick", "held-a", "held-b")] == [1, 2, 2]
    assert _marked(marker) == []


def test_a_batch_keeps_products_ready_by_default_and_leaves_none(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default (min(--concurrency, 4) ready products for --cwd) against --warm 0: the
    # same records, one more app-server started per ready product left at the end, and
    # no process alive after either batch (docs/harness.md, "Ready products").
    ids = [f"ready-{n}" for n in range(4)]
    started: dict[str, int] = {}
    for flags in ((), ("--warm", "0")):
        setup.out.unlink(missing_ok=True)
        tasks = setup.tasks(*(task_line(task_id) for task_id in ids))
        with ProcessWatch() as watch:
            code = main(_batch(setup, "subagent_codex", tasks, "--concurrency", "1", *flags))
        err = capsys.readouterr().err
        assert code == 0, err
        records = setup.records()
        assert {i: records[i]["answer"] for i in ids} == {i: answer_for(i) for i in ids}
        assert watch.alive() == []
        started[" ".join(flags) or "default"] = sum(p.name == "codex" for p in watch.seen)
    assert started["--warm 0"] == len(ids)
    assert started["default"] == len(ids) + 1  # one ready product was never claimed
