"""``dsh batch`` on the real ``dsh`` executable: what is refused before the first task,
the results file's lock, ``--retry-failed`` and the summary's totals.

The sandbox is :mod:`cli_sandbox`'s; the product is the example provider's scripted
child. A task ``dsh-contract/1 hold <token>`` touches ``<sandbox>/<token>`` once its
product runs, so "nothing started" is checked by that file never appearing.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from cli_sandbox import Sandbox, finish, no_traceback, run, wait_for_file
from cli_sandbox import dsh as start_dsh

HELD = "T-" + "0d0d0d01"


def _tasks(box: Sandbox, *lines: dict[str, Any], name: str = "tasks.jsonl") -> Path:
    path = box.root / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _batch(box: Sandbox, tasks: Path, out: Path | str, *extra: str) -> list[str]:
    return ["batch", str(box.profile), "subagent_example", str(tasks), "--out", str(out), *extra]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _hold(task_id: str = "held") -> dict[str, str]:
    return {"id": task_id, "task": f"dsh-contract/1 hold {HELD}"}


# --- checked before the first task ------------------------------------------------------


def test_a_base_cwd_that_does_not_exist_is_one_line_exit_2_and_nothing_runs(
    sandbox: Sandbox,
) -> None:
    tasks = _tasks(sandbox, _hold(), {"id": "b", "task": "Do b."})
    out = sandbox.root / "results.jsonl"
    missing = "/does/not/exist-4711"
    code, stdout, err = run(sandbox, *_batch(sandbox, tasks, out, "--cwd", missing))
    assert code == 2, err
    assert stdout == ""
    assert err == f"dsh: error: --cwd {missing!r} is not an accessible directory\n"
    assert not out.exists()  # nothing recorded: resuming later runs every task
    assert not (sandbox.root / HELD).exists()  # nothing started


def test_a_task_cwd_that_does_not_exist_refuses_the_whole_batch(sandbox: Sandbox) -> None:
    (sandbox.root / "app").mkdir()
    tasks = _tasks(
        sandbox,
        _hold(),
        {"id": "nowhere", "task": "Do it.", "cwd": "no-such-dir-4711"},
        {"id": "here", "task": "Do it.", "cwd": "app"},
        {"id": "gone", "task": "Do it.", "cwd": "/no/such/dir"},
    )
    out = sandbox.root / "results.jsonl"
    earlier = '{"id":"old","stop_reason":"completed","elapsed_seconds":1.0}\n'
    out.write_text(earlier, encoding="utf-8")
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, "--cwd", str(sandbox.root)))
    assert code == 2, err
    missing = str(sandbox.root / "no-such-dir-4711")
    assert err == (
        f"dsh: error: {tasks} line 2: task 'nowhere': cwd {missing!r} is not an accessible "
        "directory (and 1 more task like it); nothing started\n"
    )
    assert out.read_text(encoding="utf-8") == earlier  # nothing recorded
    assert not (sandbox.root / HELD).exists()


def test_results_going_into_the_task_file_are_refused(sandbox: Sandbox) -> None:
    tasks = _tasks(sandbox, _hold())
    before = tasks.read_bytes()
    for out in (str(tasks), "./tasks.jsonl"):  # the same file however it is spelt
        code, _, err = run(sandbox, *_batch(sandbox, tasks, out))
        assert code == 2, err
        assert err == (
            f"dsh: error: --out {out!r} is the task file; give the results file its own path\n"
        )
    assert tasks.read_bytes() == before
    assert not (sandbox.root / HELD).exists()


def test_an_unwritable_results_path_is_refused_before_anything_starts(sandbox: Sandbox) -> None:
    tasks = _tasks(sandbox, _hold())
    out = sandbox.root / "no-such-dir" / "results.jsonl"
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out))
    assert code == 2, err
    assert err == (
        f"dsh: error: cannot write the results file {str(out)!r}: No such file or directory\n"
    )
    assert not (sandbox.root / HELD).exists()


# --- one batch per results file ---------------------------------------------------------


def test_a_second_batch_on_the_same_results_file_exits_2_at_once(sandbox: Sandbox) -> None:
    """The first batch holds the lock while its task runs; the second is refused in one
    line, starts nothing, and leaves the first one's file alone."""
    tasks = _tasks(sandbox, _hold())
    out = sandbox.root / "results.jsonl"
    argv = _batch(sandbox, tasks, out, "--cwd", str(sandbox.root))
    first = start_dsh(sandbox, *argv)
    try:
        wait_for_file(sandbox.root / HELD, first)  # the first batch's product runs
        other = _tasks(sandbox, {"id": "x", "task": "Do x."}, name="other.jsonl")
        code, _, err = run(sandbox, *_batch(sandbox, other, out, "--cwd", str(sandbox.root)))
        assert code == 2, err
        assert err == (
            f"dsh: error: another dsh batch is writing the results file {str(out)!r}; "
            "wait for it to end or give another --out\n"
        )
        assert first.poll() is None  # refused while the first batch still runs
    finally:
        os.killpg(first.pid, signal.SIGINT)
        code, _, err = finish(first)
    assert code == 130, err
    no_traceback(err)
    # The cancelled run is not recorded, and the file the first batch created is gone.
    assert not out.exists()


# --- --retry-failed and the latest record per id -----------------------------------------


def test_retry_failed_runs_the_ids_whose_latest_record_did_not_complete(
    sandbox: Sandbox,
) -> None:
    ok, bad = "T-" + "0a0a0a0a", "T-" + "0b0b0b0b"
    out = sandbox.root / "results.jsonl"
    cwd = ("--cwd", str(sandbox.root))
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": f"dsh-contract/1 complete {ok}"},
        {"id": "b", "task": f"dsh-contract/1 fail {bad}"},
    )
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, *cwd))
    assert code == 1, err
    assert err.splitlines()[-1] == f"dsh: batch: 1 completed, 1 failed; results in {out}"

    # Plain resume: both ids have a record; the line says how to run the failed one again.
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, *cwd))
    assert code == 0, err
    assert err.splitlines()[0] == (
        f"dsh: 2 of 2 tasks already in {out} (1 of them failed; --retry-failed runs those "
        "again); running 0"
    )

    # The cause was fixed (here: the task now completes); --retry-failed runs b only.
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": f"dsh-contract/1 complete {ok}"},
        {"id": "b", "task": f"dsh-contract/1 complete {bad}"},
    )
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, *cwd, "--retry-failed"))
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0] == (
        f"dsh: 1 of 2 tasks already completed in {out}; running 1 (1 again after a failed record)"
    )
    assert lines[-1] == f"dsh: batch: 1 completed, 0 failed; results in {out}"
    records = _records(out)
    assert [(r["id"], r["stop_reason"]) for r in records] == [
        ("a", "completed"),
        ("b", "error"),
        ("b", "completed"),  # appended: the latest record of b is the one that counts
    ]
    assert records[2]["answer"] == bad

    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, *cwd, "--retry-failed"))
    assert code == 0, err
    assert err.splitlines()[0] == f"dsh: 2 of 2 tasks already completed in {out}; running 0"
    assert len(_records(out)) == 3


# --- the summary line ----------------------------------------------------------------


def test_the_summary_line_ends_with_the_reported_token_totals(sandbox: Sandbox) -> None:
    tasks = _tasks(
        sandbox,
        {"id": "a", "task": "dsh-example/progress first"},
        {"id": "b", "task": "dsh-example/progress second"},
        {"id": "c", "task": "no usage reported for this one"},
    )
    out = sandbox.root / "results.jsonl"
    code, _, err = run(sandbox, *_batch(sandbox, tasks, out, "--cwd", str(sandbox.root)))
    assert code == 0, err
    # The example product reports 1,200 tokens in and 34 out per progress task, and no
    # cost: the cost part is left out rather than shown as zero.
    assert err.splitlines()[-1] == (
        f"dsh: batch: 3 completed, 0 failed; results in {out}; "
        "tokens 2,400 in, 68 out (2 of 3 tasks reported)"
    )
