"""``dsh run --cwd`` that is not an accessible directory, from outside: the real ``dsh``.

``dsh batch --cwd``, ``dsh run --worktree --cwd`` and plain ``dsh run`` (foreground and
``--background``) refuse it as a usage error: exit 2, one line naming ``--cwd``, nothing
started (``--background`` announces no job).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dsh_subprocess.testing import ProcessWatch

DSH = Path(sys.executable).with_name("dsh")
PROFILE = Path(__file__).resolve().parents[1] / "examples" / "codex.toml"


def _dsh(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [str(DSH), *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_dsh_batch_refuses_a_missing_cwd_naming_the_flag(tmp_path: Path) -> None:
    """The control: the same flag on ``dsh batch`` is a usage error today."""
    missing = str(tmp_path / "missing")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "x"}\n', encoding="utf-8")
    out = tmp_path / "r.jsonl"
    with ProcessWatch() as watch:
        done = _dsh(
            tmp_path, "batch", str(PROFILE), "subagent_codex", str(tasks), "--out", str(out),
            "--cwd", missing,
        )  # fmt: skip
        alive = watch.alive()
    assert (done.returncode, done.stderr) == (
        2,
        f"dsh: error: --cwd {missing!r} is not an accessible directory\n",
    )
    assert alive == []


@pytest.mark.parametrize("mode", [[], ["--background"]], ids=["foreground", "background"])
def test_dsh_run_refuses_a_missing_cwd_naming_the_flag(tmp_path: Path, mode: list[str]) -> None:
    missing = str(tmp_path / "missing")
    with ProcessWatch() as watch:
        done = _dsh(
            tmp_path, "run", *mode, str(PROFILE), "subagent_codex_primary", "x", "--cwd", missing
        )
        alive = watch.alive()
    assert alive == []
    assert done.stdout == ""
    assert (done.returncode, done.stderr) == (
        2,
        f"dsh: error: --cwd {missing!r} is not an accessible directory\n",
    )
