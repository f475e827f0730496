"""A hostile prelude: ``python hostile.py SPEC_JSON PROGRAM [ARG...]``.

It misbehaves the way real products were seen to (seed 004, issue 10), then ``exec``s
PROGRAM (a provider's scriptable fake), so one protocol fake gains every process-level
fault without being edited. SPEC_JSON is a list of actions run in order:

* ``{"do": "marker", "path": P}`` — write this process's pid to P (proof it started);
* ``{"do": "stderr_secrets", "env": NAME, "extra": [S, ...]}`` — write the value of the
  environment variable NAME, the cwd and every S to stderr;
* ``{"do": "ignore_term"}`` — ignore SIGTERM (inherited across ``exec``);
* ``{"do": "setsid_grandchild", "pidfile": P}`` — fork a child that calls ``setsid`` and
  sleeps with this process's stdout open;
* ``{"do": "daemon", "pidfile": P}`` — double-fork a daemon (new session, parent gone);
* ``{"do": "flood_stderr", "bytes": N, "env": NAME}`` — N bytes of stderr lines, each
  carrying the planted env value and the cwd;
* ``{"do": "flood_stdout", "bytes": N}`` — N bytes of non-protocol stdout lines;
* ``{"do": "stdout_line", "bytes": N}`` — one JSON object line of about N bytes that is
  not a protocol frame (an oversized frame before the handshake);
* ``{"do": "endless_line", "bytes": N}`` — N bytes of stdout with no newline, a MiB at a
  time (blocks once the host stops reading; the fake never runs);
* ``{"do": "exit", "code": N}`` — crash before the fake ever runs (before any handshake);
* ``{"do": "hang", "path": P}`` — write P, then block before the fake ever runs.

Standard library only: it starts before the fake and must stay cheap.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _sleeper(hold_stdout: bool) -> None:
    # In the forked child: never returns.
    if not hold_stdout:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    else:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.execvp("sleep", ["sleep", "300"])
    finally:
        os._exit(127)


def _write_pid(path: str, pid: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(str(pid))


def _flood(fd: int, total: int, line: bytes) -> None:
    # Whole lines only: a cut last line would swallow the fake's first real frame.
    per_block = max(1, 65536 // len(line))
    block = line * per_block
    lines_left = max(1, total // len(line))
    while lines_left > 0:
        chunk = block if lines_left >= per_block else line * lines_left
        lines_left -= len(chunk) // len(line)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def run(action: dict[str, object]) -> None:
    kind = action["do"]
    if kind == "marker":
        _write_pid(str(action["path"]), os.getpid())
    elif kind == "stderr_secrets":
        parts = [os.environ.get(str(action["env"]), ""), os.getcwd()]
        parts += [str(item) for item in action.get("extra", [])]  # type: ignore[attr-defined]
        os.write(2, ("hostile product stderr: " + " | ".join(parts) + "\n").encode())
    elif kind == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif kind == "setsid_grandchild":
        pid = os.fork()
        if pid == 0:
            os.setsid()
            _sleeper(hold_stdout=True)
        _write_pid(str(action["pidfile"]), pid)
    elif kind == "daemon":
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.close(write_end)
                _sleeper(hold_stdout=False)
            os.write(write_end, str(grandchild).encode())
            os._exit(0)
        os.close(write_end)
        daemon_pid = int(os.read(read_end, 64) or b"0")
        os.close(read_end)
        os.waitpid(pid, 0)
        _write_pid(str(action["pidfile"]), daemon_pid)
    elif kind == "flood_stderr":
        secret = os.environ.get(str(action["env"]), "")
        line = f"flood {secret} {os.getcwd()} ........................................\n"
        _flood(2, int(action["bytes"]), line.encode())  # type: ignore[call-overload]
    elif kind == "flood_stdout":
        _flood(1, int(action["bytes"]), b"not a protocol frame: " + b"x" * 100 + b"\n")  # type: ignore[call-overload]
    elif kind == "stdout_line":
        pad = "x" * int(action["bytes"])  # type: ignore[call-overload]
        line = ('{"type": "reliability_padding", "pad": "' + pad + '"}\n').encode()
        view = memoryview(line)
        while view:
            view = view[os.write(1, view) :]
    elif kind == "endless_line":
        chunk = memoryview(b"x" * (1 << 20))
        left = int(action["bytes"])  # type: ignore[call-overload]
        while left > 0:
            left -= os.write(1, chunk[: min(left, len(chunk))])
    elif kind == "exit":
        os._exit(int(action["code"]))  # type: ignore[call-overload]
    elif kind == "hang":
        _write_pid(str(action["path"]), os.getpid())
        while True:
            time.sleep(3600)
    else:
        raise SystemExit(f"hostile: unknown action {kind!r}")


def main() -> None:
    actions = json.loads(sys.argv[1])
    for action in actions:
        run(action)
    program = sys.argv[2:]
    os.execv(program[0], program)


if __name__ == "__main__":
    main()
