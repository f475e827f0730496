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

import psutil
import pytest
from dsh_contract_tests.fixtures import responses
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies

pytestmark = pytest.mark.keyless

PAGE = Path(__file__).resolve().parents[1] / "docs" / "batch.md"
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_BATCH_PYTHON_DOCS_TESTS"


def python_example() -> str:
    """The one Python block of the page's ``run_batch`` section."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## From Python: `dsh_batch.run_batch`", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return str(block)


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


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER_NAME) == marker and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


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
        codex_env = responses.codex_keyless_env(tmp_path / "codex")
        responses.write_codex_config(codex_env["CODEX_HOME"], model.base_url)
        table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in codex_env.items())
        (work / "profile.toml").write_text(
            '[[providers]]\ntype = "codex"\n\n[providers.config.env]\n'
            f"{table}\n\n"
            '[[tools]]\nname = "subagent_codex"\nprovider = "codex"\n'
            'background_mode = "disabled"\n',
            encoding="utf-8",
        )
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
            left = _marked(marker)
        finally:
            for proc in _marked(marker):
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
