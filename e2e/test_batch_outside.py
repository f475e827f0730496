"""The batch engine from outside: docs/batch.md's examples in a clean venv without dsh-cli.

The wheels of ``dsh-batch``, of the dsh distributions it depends on and of
``dsh-subagent-codex`` are built and installed with pip into a new venv (with
``ray[data]`` from the index), as a Ray user would; the page's ``run_batch`` example and
its Ray Data example then run verbatim with that venv's Python against the REAL Codex and
the loopback model fixture served by this process (scripts/batch_outside.py).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from batch_outside import (
    BATCH,
    PROVIDER,
    Router,
    build_wheels,
    docs_example,
    dsh_closure,
    make_venv,
    run_example,
)
from doc_examples import write_codex_profile
from dsh_contract_tests.fixtures import responses
from fresh_venv import ROOT, install_problems

pytestmark = [pytest.mark.keyless, pytest.mark.timeout(1800)]

# Ray wheels exist for this Python when the workspace could install them (dsh-batch[ray]).
RAY = importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="module")
def short_root() -> Iterator[Path]:
    # Short: Ray's unix socket paths under TMPDIR/ray must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="bo-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def outside(short_root: Path) -> tuple[Path, list[str]]:
    """The clean venv's Python and the distributions built for it."""
    names = build_wheels(short_root / "dist")
    python = make_venv(short_root / "venv", short_root / "dist", ray=RAY)
    return python, names


def test_the_built_set_is_the_batch_closure_and_one_provider() -> None:
    assert dsh_closure(BATCH) == {
        "dsh-batch",
        "dsh-profiles",
        "dsh-subagent",
        "dsh-subprocess",
        "dsh-tool-jobs",
        "dsh-worktree",
    }
    assert "dsh-cli" not in dsh_closure(BATCH, PROVIDER)
    assert "dsh-batch" in dsh_closure("dsh-cli")  # the CLI is the one that depends


def test_the_clean_venv_has_wheels_only_and_no_cli(outside: tuple[Path, list[str]]) -> None:
    python, names = outside
    assert install_problems(python, set(names)) == []
    cli = subprocess.run(
        [str(python), "-c", "import dsh_cli"], capture_output=True, text=True, check=False
    )
    assert "ModuleNotFoundError: No module named 'dsh_cli'" in cli.stderr
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    dsh = {row["name"] for row in json.loads(listed.stdout) if row["name"].startswith("dsh")}
    assert dsh == set(names)


def _from_outside(programs: set[str], venv: Path) -> None:
    """Every program the run started by path came from the clean venv (none from the
    workspace), and the product was its pinned Codex."""
    paths = {p for p in programs if p.startswith("/")}
    assert not {p for p in paths if Path(p).is_relative_to(ROOT)}, sorted(paths)
    assert str(venv / "bin" / "python") in paths
    assert any(p.startswith(str(venv / "lib")) and p.endswith("/bin/codex") for p in paths)


def test_the_run_batch_example_runs_from_the_clean_venv(
    outside: tuple[Path, list[str]], short_root: Path
) -> None:
    python, _ = outside
    router = Router()
    work = short_root / "py"
    work.mkdir()
    (work / "ISSUES.md").write_text("101: a typo\n102: a crash\n", encoding="utf-8")
    with responses.ResponsesFixture(route=router) as model:
        write_codex_profile(work / "profile.toml", short_root / "py-env", model.base_url)
        got = run_example(
            python,
            docs_example("## From Python: `dsh_batch.run_batch`"),
            work,
            short_root / "py-env",
        )
    assert got.done.returncode == 0, got.done.stderr[-4000:]
    assert got.done.stderr == ""
    assert got.left == []
    lines = got.done.stdout.splitlines()
    assert sorted(lines[:2]) == ["settled issue-101: completed", "settled issue-102: completed"]
    assert lines[2:] == ["issue-101 completed FIX-101", "issue-102 completed FIX-102"]
    assert sorted(router.seen) == ["101", "102"]
    records = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    assert sorted(record["id"] for record in records) == ["issue-101", "issue-102"]
    _from_outside(got.programs, python.parents[1])


@pytest.mark.xdist_group("ray")
@pytest.mark.skipif(not RAY, reason="ray has no wheels for this Python (dsh-batch[ray])")
def test_the_ray_data_example_runs_from_the_clean_venv(
    outside: tuple[Path, list[str]], short_root: Path
) -> None:
    python, _ = outside
    router = Router()
    work = short_root / "rd"
    (work / "batch-files").mkdir(parents=True)
    tags = ("R1", "R2", "R3")
    rows = [{"id": tag.lower(), "task": f"ROW-TAG {tag}. Reply with it."} for tag in tags]
    (work / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with responses.ResponsesFixture(route=router) as model:
        write_codex_profile(
            work / "batch-files" / "profile.toml", short_root / "rd-env", model.base_url
        )
        got = run_example(
            python, docs_example("## In a Ray Data pipeline"), work, short_root / "rd-env"
        )
    assert got.done.returncode == 0, got.done.stderr[-4000:]
    assert got.left == []
    written = sorted((work / "results").glob("*.json*"))
    out = [json.loads(line) for path in written for line in path.read_text().splitlines()]
    by_id = {row["id"]: row for row in out}
    assert sorted(by_id) == ["r1", "r2", "r3"]
    for tag in tags:
        row = by_id[tag.lower()]
        assert (row["stop_reason"], row["answer"]) == ("completed", f"ANSWER-{tag}"), row
    assert sorted(router.seen) == list(tags)
    _from_outside(got.programs, python.parents[1])
