"""Running the real ``dsh`` executable the way a terminal does, in a sandbox.

Each run is the venv's console script as a subprocess in its own session (Ctrl-C is sent
to the whole group, as a terminal does) with a temporary HOME, CODEX_HOME,
CLAUDE_CONFIG_DIR and TMPDIR. The product is the example provider's scripted child
(``dsh-contract/1 <complete|fail|hold> <token>``, plus ``dsh-example/progress`` for
progress events).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil
import pytest

DSH = Path(sys.executable).with_name("dsh")
REPO = Path(__file__).resolve().parents[3]
TOKEN = "T-" + "c0ffee42"

# Loaded by the interpreter at startup through PYTHONPATH: when the command imports
# BLOCK_MODULE, say so with a file and wait for a signal inside that import (the import
# then goes on, unless the signal raised KeyboardInterrupt there).
SITECUSTOMIZE = """
import os, signal, sys

class _BlockImport:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("DSH_TEST_BLOCK_MODULE"):
            sys.meta_path.remove(self)
            open(os.environ["DSH_TEST_READY_FILE"], "w").close()
            signal.pause()
        return None

if os.environ.get("DSH_TEST_BLOCK_MODULE"):
    sys.meta_path.insert(0, _BlockImport())
"""


@dataclass
class Sandbox:
    root: Path
    env: dict[str, str]
    profile: Path
    marker: str

    def survivors(self) -> list[psutil.Process]:
        """Live processes started with this sandbox's marker in their environment."""
        alive = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("PROCESS_MARKER_FOR_DSH_CLI_TESTS") == self.marker:
                    alive.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return alive


def make_sandbox(tmp_path: Path) -> Sandbox:
    """Temporary homes, a process marker, loopback-only proxies and an example profile."""
    assert DSH.is_file(), f"the dsh console script is missing next to {sys.executable}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    for name in ("HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "TMPDIR"):
        path = tmp_path / name.lower()
        path.mkdir()
        env[name] = str(path)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    marker = uuid.uuid4().hex
    env.update(
        PYTHONPATH=str(hooks),
        PROCESS_MARKER_FOR_DSH_CLI_TESTS=marker,
        DSH_CONTRACT_READY_DIR=str(tmp_path),
        DSH_CONTRACT_STDERR_TEXT="PRODUCT-STDERR-LINE from the child",
        # Nothing leaves loopback, whatever a product would try.
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        ALL_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
    )
    profile = tmp_path / "profile.toml"
    # DSH_* names never pass the scrub on their own: the profile copies them in. The
    # holding child writes its ready file in the sandbox, which is outside a worktree's
    # cwd: the instance grants it, as a user grants a product's extra path.
    profile.write_text(
        '[[providers]]\ntype = "example"\n'
        'pass_env = ["DSH_CONTRACT_READY_DIR", "DSH_CONTRACT_STDERR_TEXT"]\n'
        f"config = {{ confinement = {{ write = [{json.dumps(str(tmp_path))}] }} }}\n\n"
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    return Sandbox(tmp_path, env, profile, marker)


def check_no_survivor(box: Sandbox) -> None:
    """Fail (after killing them) if processes of this sandbox outlived dsh."""
    survivors = box.survivors()
    for proc in survivors:
        proc.kill()
    assert survivors == [], "a process outlived dsh"


# The test plays the user's shell: dsh is started the way a terminal starts it.
Dsh = subprocess.Popen[str]  # noqa: TID251 - the dsh executable, not a product


def dsh(box: Sandbox, *argv: str, **env: str) -> Dsh:
    """Start ``dsh *argv`` in the sandbox, in its own session, stdout and stderr piped."""
    return start(box, argv, subprocess.PIPE, env)


def start(box: Sandbox, argv: Sequence[str], stderr: int | IO[str], env: Mapping[str, str]) -> Dsh:
    """Start ``dsh *argv`` with ``stderr`` (a pipe, a file or a terminal) and extra ``env``."""
    return subprocess.Popen(  # noqa: TID251 - the dsh executable, not a product
        [str(DSH), *argv],
        env={**box.env, **env},
        cwd=box.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


def finish(proc: Dsh) -> tuple[int, str, str]:
    """Wait for dsh; its exit status, stdout and stderr."""
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def run(box: Sandbox, *argv: str, **env: str) -> tuple[int, str, str]:
    """Run ``dsh *argv`` to its end."""
    return finish(dsh(box, *argv, **env))


def wait_for_file(path: Path, proc: Dsh) -> None:
    """Wait until ``path`` exists (the event), failing early if dsh already exited."""
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"dsh exited {proc.returncode} before {path.name}: {out!r} {err!r}")
        time.sleep(0.01)


def no_traceback(err: str) -> None:
    """A failure was shown as lines, never as a traceback."""
    assert "Traceback" not in err
    assert "ExceptionGroup" not in err
    assert "KeyboardInterrupt" not in err
