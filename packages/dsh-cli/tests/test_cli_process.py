"""The real ``dsh`` executable: one-line start failures, Ctrl-C at any moment, ``-v``.

The sandbox is :mod:`cli_sandbox`'s. The product is the example provider's scripted
child or, for a malformed Codex home, the real Codex app-server with every HTTP proxy
pointing at a closed loopback port.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_sandbox import DSH, REPO, TOKEN, Sandbox, finish, no_traceback, wait_for_file
from cli_sandbox import dsh as _dsh
from cli_sandbox import run as _run


def test_a_parent_cwd_that_does_not_exist_is_one_line_exit_2(sandbox: Sandbox) -> None:
    """The flag is checked before the profile loads: a usage error naming it and the
    path the user gave (the runtime itself keeps paths off its messages)."""
    missing = sandbox.root / "no-such-dir-4711"
    code, out, err = _run(
        sandbox, "run", str(sandbox.profile), "subagent_example", "Do it.", "--cwd", str(missing)
    )
    assert (code, out) == (2, ""), err
    assert err == f"dsh: error: --cwd {str(missing)!r} is not an accessible directory\n"


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
    no_traceback(err)
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
    no_traceback(err)
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
    wait_for_file(sandbox.root / TOKEN, proc)  # the child and its grandchild are live
    assert sandbox.survivors(), "the held run's processes should be visible"
    os.killpg(proc.pid, signal.SIGINT)
    code, _, err = finish(proc)
    assert code == 130, err
    assert "dsh: SIGINT: cancelling the run" in err
    assert "(stop reason: aborted)" in err
    no_traceback(err)
    assert sandbox.survivors() == []


@pytest.mark.parametrize(
    "module", ["dsh_cli.cli", "anyio", "dsh_profiles.loader", "anyio._backends._asyncio"]
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
    no_traceback(err)
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
    wait_for_file(ready, proc)  # dsh is inside `import <module>`
    os.killpg(proc.pid, signal.SIGINT)
    return finish(proc)


@pytest.mark.keyless
def test_the_demo_shows_no_product_log_line(sandbox: Sandbox) -> None:
    """``dsh demo`` drives the real Codex and Claude Code: their stderr stays off screen."""
    code, out, err = _run(sandbox, "demo")
    assert code == 0, out + err
    assert err == ""
    assert "dsh.product" not in out
    assert "codex_app_server" not in out


def _with_closed_stdout(sandbox: Sandbox, *argv: str) -> tuple[int, str]:
    """Run ``dsh *argv | head -c 0``: stdout is a pipe whose reader is already gone."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a shell starts it
            [str(DSH), *argv],
            env=sandbox.env,
            cwd=sandbox.root,
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        os.close(writer)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["answer", "json record"])
def test_a_closed_stdout_ends_dsh_run_quietly_with_status_141(
    sandbox: Sandbox, extra: tuple[str, ...]
) -> None:
    """Deliberate: 141 (128 + SIGPIPE) is what a shell shows for ``cat`` or ``grep`` whose
    reader went away; the answer was not delivered, so it is not 0."""
    task = f"dsh-contract/1 complete {TOKEN}"
    argv = ("run", str(sandbox.profile), "subagent_example", task, *extra)
    code, err = _with_closed_stdout(sandbox, *argv)
    assert code == 141, err
    no_traceback(err)
    assert "BrokenPipe" not in err
    assert "internal error" not in err
    assert "Exception ignored" not in err


@pytest.mark.parametrize("tools", [1, 60], ids=["buffered", "larger than the buffers"])
def test_a_closed_stdout_ends_dsh_tools_quietly_with_status_141(
    sandbox: Sandbox, tools: int
) -> None:
    # 60 tools make ~60 KiB of schemas, past the 8 KiB stdout buffer: a write fails, not the
    # last flush.
    rows = "".join(
        f'[[tools]]\nname = "subagent_{n}"\nprovider = "example"\nbackground_mode = "disabled"\n'
        for n in range(tools)
    )
    profile = sandbox.root / "many.toml"
    profile.write_text('[[providers]]\ntype = "example"\n\n' + rows, encoding="utf-8")
    code, err = _with_closed_stdout(sandbox, "tools", str(profile))
    assert code == 141, err
    assert err == ""
