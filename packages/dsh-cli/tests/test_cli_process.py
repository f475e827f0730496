"""The real ``dsh`` executable: one-line start failures, Ctrl-C at any moment, ``-v``.

Each test runs the venv's console script as a subprocess in its own session (Ctrl-C is
sent to the whole group, as a terminal does) with a temporary HOME, CODEX_HOME,
CLAUDE_CONFIG_DIR and TMPDIR. The product is the example provider's scripted child
(``dsh-contract/1 <complete|fail|hold> <token>``) or, for a malformed Codex home, the
real Codex app-server with every HTTP proxy pointing at a closed loopback port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
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
    # DSH_* names never pass the scrub on their own: the profile copies them in.
    profile.write_text(
        '[[providers]]\ntype = "example"\n'
        'pass_env = ["DSH_CONTRACT_READY_DIR", "DSH_CONTRACT_STDERR_TEXT"]\n\n'
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    box = Sandbox(tmp_path, env, profile, marker)
    yield box
    survivors = box.survivors()
    for proc in survivors:
        proc.kill()
    assert survivors == [], "a process outlived dsh"


# The test plays the user's shell: dsh is started the way a terminal starts it.
_Dsh = subprocess.Popen[str]  # noqa: TID251 - the dsh executable, not a product


def _dsh(box: Sandbox, *argv: str, **env: str) -> _Dsh:
    return subprocess.Popen(  # noqa: TID251 - the dsh executable, not a product
        [str(DSH), *argv],
        env={**box.env, **env},
        cwd=box.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(proc: _Dsh) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _run(box: Sandbox, *argv: str, **env: str) -> tuple[int, str, str]:
    return _finish(_dsh(box, *argv, **env))


def _wait_for_file(path: Path, proc: _Dsh) -> None:
    """Wait until ``path`` exists (the event), failing early if dsh already exited."""
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"dsh exited {proc.returncode} before {path.name}: {out!r} {err!r}")
        time.sleep(0.01)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err
    assert "ExceptionGroup" not in err
    assert "KeyboardInterrupt" not in err


def test_a_parent_cwd_that_does_not_exist_is_one_line_exit_1(sandbox: Sandbox) -> None:
    missing = sandbox.root / "no-such-dir-4711"
    code, out, err = _run(
        sandbox, "run", str(sandbox.profile), "subagent_example", "Do it.", "--cwd", str(missing)
    )
    assert code == 1, err
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("dsh: example: could not start: subagent-example: ")
    assert "no-such-dir-4711" not in err  # the runtime keeps paths off its messages
    _no_traceback(err)


def test_a_malformed_codex_home_is_one_dsh_line_without_the_config_path(
    sandbox: Sandbox,
) -> None:
    codex_home = Path(sandbox.env["CODEX_HOME"])
    (codex_home / "config.toml").write_text("model = [unclosed\n", encoding="utf-8")
    code, out, err = _run(
        sandbox,
        "run",
        str(REPO / "examples" / "codex.toml"),
        "subagent_codex",
        "Do it.",
        "--cwd",
        str(sandbox.root),
    )
    assert code == 1, err
    assert out == ""
    _no_traceback(err)
    # Codex's own stderr (which names the file) is logged and shown only with -v.
    (line,) = err.splitlines()
    assert line.startswith("dsh: codex: could not start: ")
    assert str(codex_home) not in err


def test_product_stderr_is_shown_only_with_verbose(sandbox: Sandbox) -> None:
    task = f"dsh-contract/1 fail {TOKEN}"
    argv = ("run", str(sandbox.profile), "subagent_example", task, "--cwd", str(sandbox.root))
    code, out, err = _run(sandbox, *argv)
    assert code == 1
    assert "PRODUCT-STDERR-LINE" not in err + out
    assert err.splitlines()[0] == "dsh: example: subagent run failed (stop reason: error)"
    _no_traceback(err)
    for verbose in (("-v", *argv), (argv[0], "--verbose", *argv[1:])):
        code, out, err = _run(sandbox, *verbose)
        assert code == 1
        assert "dsh.product.example: PRODUCT-STDERR-LINE from the child" in err.splitlines()
        assert "PRODUCT-STDERR-LINE" not in out


def test_ctrl_c_during_a_live_run_cancels_it_exits_130_and_leaves_nothing(
    sandbox: Sandbox,
) -> None:
    proc = _dsh(
        sandbox,
        "run",
        str(sandbox.profile),
        "subagent_example",
        f"dsh-contract/1 hold {TOKEN}",
        "--cwd",
        str(sandbox.root),
    )
    _wait_for_file(sandbox.root / TOKEN, proc)  # the child and its grandchild are live
    assert sandbox.survivors(), "the held run's processes should be visible"
    os.killpg(proc.pid, signal.SIGINT)
    code, _, err = _finish(proc)
    assert code == 130, err
    assert "dsh: SIGINT: cancelling the run" in err
    assert "(stop reason: aborted)" in err
    _no_traceback(err)
    assert sandbox.survivors() == []


@pytest.mark.parametrize(
    "module", ["dsh_cli.cli", "anyio", "dsh_cli.loader", "anyio._backends._asyncio"]
)
def test_ctrl_c_during_startup_imports_exits_130_quietly(sandbox: Sandbox, module: str) -> None:
    code, out, err = _interrupt_inside_import(sandbox, module)
    assert code == 130, err
    assert out == ""
    assert err == "dsh: interrupted\n"


def test_ctrl_c_while_the_event_loop_starts_the_run_exits_130_quietly(sandbox: Sandbox) -> None:
    # anyio imports its socket helpers lazily, once the command's event loop is running;
    # which handler sees the signal there is anyio's business, the outcome is not.
    code, out, err = _interrupt_inside_import(sandbox, "anyio._core._sockets")
    assert code == 130, err
    assert out == ""
    _no_traceback(err)
    assert err.splitlines()
    assert all(line.startswith("dsh: ") for line in err.splitlines()), err


def _interrupt_inside_import(sandbox: Sandbox, module: str) -> tuple[int, str, str]:
    ready = sandbox.root / "importing"
    proc = _dsh(
        sandbox,
        "run",
        str(sandbox.profile),
        "subagent_example",
        f"dsh-contract/1 hold {TOKEN}",
        "--cwd",
        str(sandbox.root),
        DSH_TEST_BLOCK_MODULE=module,
        DSH_TEST_READY_FILE=str(ready),
    )
    _wait_for_file(ready, proc)  # dsh is inside `import <module>`
    os.killpg(proc.pid, signal.SIGINT)
    return _finish(proc)


@pytest.mark.keyless
def test_the_demo_shows_no_product_log_line(sandbox: Sandbox) -> None:
    """``dsh demo`` drives the real Codex and Claude Code: their stderr stays off screen."""
    code, out, err = _run(sandbox, "demo")
    assert code == 0, out + err
    assert err == ""
    assert "dsh.product" not in out
    assert "codex_app_server" not in out
