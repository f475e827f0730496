"""The Python example of docs/batch.md (``run_batch``), run verbatim as a user's script.

The block is taken from the page and run by this environment's Python in a directory
laid out as the page says (``profile.toml`` with a ``subagent_codex`` tool, an
``ISSUES.md``); the product is the REAL Codex against the loopback model fixture. Every
process of the run carries a marker in its environment and this process is a child
subreaper, so the accounting sees what the script left.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from doc_examples import marked, python_block, write_codex_profile
from dsh_contract_tests.fixtures import responses
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies

pytestmark = pytest.mark.keyless

PAGE = Path(__file__).resolve().parents[1] / "docs" / "batch.md"
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_BATCH_PYTHON_DOCS_TESTS"


def python_example() -> str:
    """The one Python block of the page's ``run_batch`` section."""
    return python_block(PAGE, "## From Python: `dsh_batch.run_batch`")


@dataclass
class Router:
    """Answers each task by the issue number in its text."""

    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        found = re.search(r"Read issue (\d+) in ISSUES", json.dumps(request.body))
        if found is None:
            return None
        with self.lock:
            self.seen.append(found.group(1))
        return responses.PlainAnswer(f"FIX-{found.group(1)}", "final_answer")


def test_the_python_example_runs_as_written_and_resumes(tmp_path: Path) -> None:
    become_subreaper()
    router = Router()
    work = tmp_path / "w"
    work.mkdir()
    (work / "ISSUES.md").write_text("101: a typo\n102: a crash\n", encoding="utf-8")
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "TMPDIR"):
        (tmp_path / name.lower()).mkdir()
        env[name] = str(tmp_path / name.lower())
    env[MARKER_NAME] = marker
    with responses.ResponsesFixture(route=router) as model:
        write_codex_profile(work / "profile.toml", tmp_path, model.base_url)
        runs = []
        try:
            for _ in range(2):  # the second run resumes: every task has a record
                runs.append(
                    subprocess.run(
                        [sys.executable, "-c", python_example()],
                        cwd=work,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        text=True,
                        timeout=600,
                        check=False,
                    )
                )
            left = marked(MARKER_NAME, marker)
        finally:
            for proc in marked(MARKER_NAME, marker):
                proc.kill()
            reap_adopted_zombies()
    for done in runs:
        assert done.returncode == 0, done.stderr[-4000:]
        assert done.stderr == ""  # the library printed nothing behind the script's back
    assert left == [], f"left behind: {[proc.name() for proc in left]}"
    first, second = runs[0].stdout.splitlines(), runs[1].stdout.splitlines()
    assert sorted(first[:2]) == ["settled issue-101: completed", "settled issue-102: completed"]
    assert first[2:] == ["issue-101 completed FIX-101", "issue-102 completed FIX-102"]
    assert second == first[2:]  # resumed: nothing ran, the records came from the file
    assert sorted(router.seen) == ["101", "102"]
    records = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    assert sorted(record["id"] for record in records) == ["issue-101", "issue-102"]
