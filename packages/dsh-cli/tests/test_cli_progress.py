"""The real ``dsh run`` shows progress: live on a terminal, plain lines otherwise, ``--json``.

The example provider's child reports a piece of text, a ``Bash`` tool call and usage
(1200 input, 34 output tokens) when the task contains ``dsh-example/progress``. The
terminal runs use a pseudo-terminal as stderr (stdout stays a pipe, so the test sees
exactly what would reach a script reading the answer); assertions are on the frames'
content, never on timing.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import termios
from dataclasses import dataclass

from cli_sandbox import TOKEN, Dsh, Sandbox, finish, no_traceback, run, start, wait_for_file

PROGRESS_TASK = f"dsh-example/progress\ndsh-contract/1 complete {TOKEN}"
HOLD_TASK = f"dsh-example/progress\ndsh-contract/1 hold {TOKEN}"
TOKENS = "1,234 tokens (1,200 in, 34 out)"
ELAPSED = r"(\d+\.\ds|\d+m \d\ds)"
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _argv(box: Sandbox, task: str, *flags: str) -> tuple[str, ...]:
    return ("run", *flags, str(box.profile), "subagent_example", task, "--cwd", str(box.root))


@dataclass
class TerminalRun:
    code: int
    out: str
    screen: str  # everything written to the terminal, escape sequences removed

    @property
    def frames(self) -> list[str]:
        """Each redraw of the status line, and every other line, in order."""
        return [part.strip() for part in re.split(r"[\r\n]+", self.screen) if part.strip()]


class _Terminal:
    """A pseudo-terminal (100 columns) as dsh's stderr."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        self.chunks: list[bytes] = []

    def start(self, box: Sandbox, *argv: str) -> Dsh:
        with os.fdopen(self.slave, "w", closefd=True) as slave:
            return start(box, argv, slave, {"TERM": "xterm-256color", "COLUMNS": "100"})

    def read_until(self, text: str) -> None:
        """Read the terminal until ``text`` was shown (or dsh closed it)."""
        while text not in self.screen() and self._read():
            pass

    def _read(self) -> bool:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            return False
        self.chunks.append(data)
        return bool(data)

    def finish(self, proc: Dsh) -> TerminalRun:
        while self._read():
            pass
        os.close(self.master)
        code, out, _ = finish(proc)
        return TerminalRun(code, out, self.screen())

    def screen(self) -> str:
        return _CSI.sub("", b"".join(self.chunks).decode("utf-8", "replace"))


def test_a_terminal_shows_elapsed_time_activity_and_tokens_live(sandbox: Sandbox) -> None:
    terminal = _Terminal()
    shown = terminal.finish(terminal.start(sandbox, *_argv(sandbox, PROGRESS_TASK)))
    assert shown.code == 0, shown.screen
    assert shown.out == f"{TOKEN}\n"  # the answer alone on stdout
    assert TOKEN not in shown.screen  # and never on the terminal
    frames = shown.frames
    spinner = r"\S "  # a spinner character while the run is live
    live = [
        rf"{spinner}example  {ELAPSED}  starting  · no token count yet",
        rf"{spinner}example  {ELAPSED}  writing  · no token count yet",
        rf"{spinner}example  {ELAPSED}  running Bash  · no token count yet",
        rf"{spinner}example  {ELAPSED}  running Bash  · {re.escape(TOKENS)}",
    ]
    for pattern in live:
        assert any(re.fullmatch(pattern, frame) for frame in frames), (pattern, frames)
    # The last frame stays on screen with the outcome; dsh's status line follows it.
    assert re.fullmatch(rf"example  {ELAPSED}  completed  · {re.escape(TOKENS)}", frames[-2])
    assert frames[-1] == "dsh: example: completed"
    no_traceback(shown.screen)


def test_ctrl_c_under_the_live_display_prints_above_it_and_exits_130(sandbox: Sandbox) -> None:
    terminal = _Terminal()
    proc = terminal.start(sandbox, *_argv(sandbox, HOLD_TASK))
    wait_for_file(sandbox.root / TOKEN, proc)  # the product holds its turn
    terminal.read_until(TOKENS)
    os.killpg(proc.pid, signal.SIGINT)
    shown = terminal.finish(proc)
    assert shown.code == 130, shown.screen
    assert shown.out == ""
    frames = shown.frames
    # dsh's own line is a line of its own, not written through the status line.
    assert "dsh: SIGINT: cancelling the run" in frames
    assert any(
        re.fullmatch(rf"example  {ELAPSED}  aborted  · {re.escape(TOKENS)}", frame)
        for frame in frames
    ), frames
    assert frames[-1] == "dsh: example: subagent run was cancelled (stop reason: aborted)"
    assert sandbox.survivors() == []


def test_product_log_lines_print_above_the_live_display_with_verbose(sandbox: Sandbox) -> None:
    terminal = _Terminal()
    task = f"dsh-example/progress\ndsh-contract/1 fail {TOKEN}"
    shown = terminal.finish(terminal.start(sandbox, "-v", *_argv(sandbox, task)))
    assert shown.code == 1, shown.screen
    assert "dsh.product.example: PRODUCT-STDERR-LINE from the child" in shown.frames


PLAIN_LINES = [
    r"dsh: example: \[\d+\.\ds\] assistant-text streaming",
    r"dsh: example: \[\d+\.\ds\] tool-started command Bash",
    r"dsh: example: \[\d+\.\ds\] usage-updated input=1200 cached_input=- output=34 "
    r"reasoning=- cost_usd=-",
]


def test_not_a_terminal_one_plain_line_per_event(sandbox: Sandbox) -> None:
    code, out, err = run(sandbox, *_argv(sandbox, PROGRESS_TASK))
    assert code == 0, err
    assert out == f"{TOKEN}\n"
    lines = err.splitlines()
    assert len(lines) == len(PLAIN_LINES) + 1, lines
    for pattern, line in zip(PLAIN_LINES, lines, strict=False):
        assert re.fullmatch(pattern, line), (pattern, line)
    assert lines[-1] == "dsh: example: completed"
    assert "\x1b" not in err  # no escape sequence when stderr is not a terminal


def test_json_is_one_record_on_stdout(sandbox: Sandbox) -> None:
    code, out, err = run(sandbox, *_argv(sandbox, PROGRESS_TASK, "--json"))
    assert code == 0, err
    (line,) = out.splitlines()
    record = json.loads(line)
    assert set(record) == {
        "answer",
        "stop_reason",
        "diagnostic",
        "usage",
        "changes",
        "elapsed_seconds",
        "continuation",
    }
    assert record["answer"] == TOKEN
    assert record["stop_reason"] == "completed"
    assert record["diagnostic"] is None
    assert record["usage"] == {
        "input_tokens": 1200,
        "cached_input_tokens": None,
        "output_tokens": 34,
        "reasoning_tokens": None,
        "cost_usd": None,
    }
    assert isinstance(record["elapsed_seconds"], float)
    assert record["elapsed_seconds"] > 0
    # Progress and the status line stay on stderr.
    assert err.splitlines()[-1] == "dsh: example: completed"
    assert len(err.splitlines()) == len(PLAIN_LINES) + 1


def test_timeout_settles_error_with_deadline_exceeded_and_nothing_left(sandbox: Sandbox) -> None:
    # 5 s leaves the scripted child's startup (counted against the deadline) ample room
    # on a loaded machine, so the bound fires during the held turn.
    code, out, err = run(sandbox, *_argv(sandbox, HOLD_TASK, "--timeout", "5"))
    assert sandbox.survivors() == []  # the tree was gone before dsh reported
    assert code == 1, err
    assert out == ""
    lines = err.splitlines()
    assert lines[-2:] == [
        "dsh: example: subagent run failed (stop reason: error)",
        "Diagnostic: Product subagent failure "
        "(product: Example; stage: turn; category: deadline-exceeded)",
    ]
    no_traceback(err)


def test_idle_timeout_with_json_reports_the_category_and_the_usage_so_far(
    sandbox: Sandbox,
) -> None:
    code, out, err = run(sandbox, *_argv(sandbox, HOLD_TASK, "--idle-timeout", "3", "--json"))
    assert sandbox.survivors() == []
    assert code == 1, err
    record = json.loads(out)
    assert record["stop_reason"] == "error"
    assert record["diagnostic"] == (
        "Product subagent failure (product: Example; stage: turn; category: idle-timeout)"
    )
    assert record["usage"]["input_tokens"] == 1200
    assert record["usage"]["output_tokens"] == 34
