"""The Ray Data example of docs/batch.md, run verbatim as a user's script.

The block is taken from the page and run by this environment's Python in a directory
laid out as the page says (``batch-files/profile.toml`` with a ``subagent_codex`` tool,
``tasks.jsonl``); the product is the REAL Codex against the loopback model fixture. The
block's own ``ray.init()`` starts a local Ray instance (this machine's two CPUs, in the
run's short private TMPDIR, so no other cluster on the machine is found), as it would
for a user trying it out. Every process of the run carries a marker in its environment
and this process is a child subreaper, so the accounting sees what the script left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from doc_examples import marked, python_block, write_codex_profile
from dsh_contract_tests.fixtures import responses
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies

pytest.importorskip("ray", reason="ray cannot be imported on this Python (dsh-batch[ray])")
pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow (dev group)")

pytestmark = [pytest.mark.keyless, pytest.mark.xdist_group("ray")]

PAGE = Path(__file__).resolve().parents[1] / "docs" / "batch.md"
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_RAY_DOCS_TESTS"
GONE_WITHIN_SECONDS = 60.0
"""A loose bound for Ray's own shutdown at the script's exit (a loaded 2-core machine)."""


def ray_data_example() -> str:
    """The one Python block of the page's Ray Data section."""
    return python_block(PAGE, "## In a Ray Data pipeline")


@dataclass
class Router:
    """Answers each row by the tag in its task text."""

    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        body = json.dumps(request.body)
        start = body.find("ROW-TAG ")
        if start < 0:
            return None
        tag = body[start + len("ROW-TAG ") :].split(".", 1)[0]
        with self.lock:
            self.seen.append(tag)
        return responses.PlainAnswer(f"ANSWER-{tag}", "final_answer")


@pytest.fixture
def root() -> Iterator[Path]:
    become_subreaper()
    # Short: Ray's unix socket paths under TMPDIR/ray must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_ray_data_example_runs_as_written(root: Path) -> None:
    router = Router()
    work = root / "w"
    (work / "batch-files").mkdir(parents=True)
    tags = ("R1", "R2", "R3")
    rows = [{"id": tag.lower(), "task": f"ROW-TAG {tag}. Reply with it."} for tag in tags]
    (work / "tasks.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8"
    )
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_", "RAY_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Ray's agents must start within 15 s
    for name in ("HOME", "TMPDIR"):
        (root / name.lower()).mkdir()
        env[name] = str(root / name.lower())
    env[MARKER_NAME] = marker
    # These tests run under `uv run`; the page says such a driver turns Ray's uv hook off.
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    with responses.ResponsesFixture(route=router) as model:
        write_codex_profile(work / "batch-files" / "profile.toml", root, model.base_url)
        try:
            done = subprocess.run(
                [sys.executable, "-c", ray_data_example()],
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            _, left = psutil.wait_procs(marked(MARKER_NAME, marker), timeout=GONE_WITHIN_SECONDS)
        finally:
            for proc in marked(MARKER_NAME, marker):
                proc.kill()
            reap_adopted_zombies()
    assert done.returncode == 0, done.stderr[-4000:]
    assert left == [], f"left behind: {[proc.name() for proc in left]}"
    written = sorted((work / "results").glob("*.json*"))
    assert written, list(work.iterdir())
    out = [json.loads(line) for path in written for line in path.read_text().splitlines()]
    by_id = {row["id"]: row for row in out}
    assert sorted(by_id) == ["r1", "r2", "r3"]
    for tag in tags:
        row = by_id[tag.lower()]
        assert (row["stop_reason"], row["answer"]) == ("completed", f"ANSWER-{tag}"), row
        usage = json.loads(row["usage"])
        assert usage["input_tokens"] > 0
        assert "cost_usd" in usage  # the same object as a `dsh batch` record's usage
    assert sorted(router.seen) == list(tags)
    # Nothing was written into the shipped working_dir's source.
    assert sorted(p.name for p in (work / "batch-files").iterdir()) == ["profile.toml"]
