"""A scripted fake Codex app-server: ``python fake_app_server.py SCRIPT LOG``.

SCRIPT is a JSON list of steps run in order; LOG receives one JSON line per frame the
client sent (plus ``{"event": ...}`` markers). Steps:

* ``{"op": "expect", "method": M}`` — read frames until one with ``method == M``; a
  request's id becomes the target of the next ``reply``.
* ``{"op": "reply", "result": R}`` / ``{"op": "reply_error", "code": C, "message": S}``
* ``{"op": "send", "frame": F}`` — write one frame (a JSON value) plus newline.
* ``{"op": "send_many", "frames": [F, ...]}`` — several frames in one write.
* ``{"op": "write", "data": S}`` — write raw text.
* ``{"op": "write_long", "bytes": N}`` — write N bytes of ``x`` with no newline, in 1 MiB
  writes (blocks once the pipe is full and the client stops reading).
* ``{"op": "expect_reply", "id": I}`` — read until the client answers server request I.
* ``{"op": "stderr", "data": S}`` — write S to stderr.
* ``{"op": "exit", "code": N}`` / ``{"op": "kill", "signal": "SIGABRT"}``
* ``{"op": "close_stdout"}`` — close stdout but keep running.
* ``{"op": "ready", "path": P}`` — create file P (a readiness marker for tests).
* ``{"op": "wait_file", "path": P}`` — block until file P exists (the test's go signal).
* ``{"op": "wait_eof"}`` — read until stdin ends.
* ``{"op": "sleep", "seconds": S}`` — write nothing for S seconds.
* ``{"op": "hang"}`` — block forever (until a signal ends the process).
* ``{"op": "ignore_term"}`` — ignore SIGTERM from now on.
* ``{"op": "grandchild"}`` — start a sleeping grandchild holding stdout open; its pid
  is logged as ``{"event": "grandchild", "pid": N}``.

After the last step the fake reads until stdin ends, then exits 0 (like the real
app-server on stdin EOF).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


class Fake:
    def __init__(self, log_path: str) -> None:
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - lives for the process
        self.buffer = b""
        self.last_id: Any = None
        self.eof = False

    def record(self, value: Any) -> None:
        self.log.write(json.dumps(value) + "\n")
        self.log.flush()

    def read_frame(self) -> dict[str, Any] | None:
        while b"\n" not in self.buffer:
            chunk = os.read(0, 65536)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        frame = json.loads(line)
        self.record(frame)
        return frame if isinstance(frame, dict) else {}

    def write(self, data: str) -> None:
        sys.stdout.write(data)
        sys.stdout.flush()

    def step(self, step: dict[str, Any]) -> None:
        op = step["op"]
        if op == "expect":
            while True:
                frame = self.read_frame()
                if frame is None:
                    raise SystemExit(0)
                if frame.get("method") == step["method"]:
                    self.last_id = frame.get("id")
                    return
        elif op == "expect_reply":
            while True:
                frame = self.read_frame()
                if frame is None:
                    raise SystemExit(0)
                if "method" not in frame and frame.get("id") == step["id"]:
                    return
        elif op == "reply":
            self.write(json.dumps({"id": self.last_id, "result": step["result"]}) + "\n")
        elif op == "reply_error":
            error = {"code": step["code"], "message": step["message"]}
            self.write(json.dumps({"id": self.last_id, "error": error}) + "\n")
        elif op == "send":
            self.write(json.dumps(step["frame"]) + "\n")
        elif op == "send_many":
            self.write("".join(json.dumps(frame) + "\n" for frame in step["frames"]))
        elif op == "write":
            self.write(step["data"])
        elif op == "write_long":
            block = b"x" * (1 << 20)
            left = int(step["bytes"])
            while left > 0:
                view = memoryview(block)[: min(left, len(block))]
                left -= len(view)
                while view:
                    view = view[os.write(1, view) :]
        elif op == "stderr":
            sys.stderr.write(step["data"])
            sys.stderr.flush()
        elif op == "exit":
            sys.stdout.flush()
            os._exit(step["code"])
        elif op == "kill":
            sys.stdout.flush()
            os.kill(os.getpid(), getattr(signal, step["signal"]))
            time.sleep(60)
        elif op == "close_stdout":
            sys.stdout.flush()
            os.close(1)
        elif op == "ready":
            with open(step["path"], "w", encoding="utf-8"):
                pass
        elif op == "wait_file":
            while not os.path.exists(step["path"]):
                time.sleep(0.01)
        elif op == "wait_eof":
            while self.read_frame() is not None:
                pass
        elif op == "sleep":
            time.sleep(float(step["seconds"]))
        elif op == "hang":
            while True:
                time.sleep(3600)
        elif op == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif op == "grandchild":
            child = subprocess.Popen(  # noqa: TID251 - the fake builds a tree on purpose
                [sys.executable, "-c", "import time; time.sleep(3600)"],
                stdout=sys.stdout.fileno(),
            )
            self.record({"event": "grandchild", "pid": child.pid})
        else:
            raise SystemExit(f"fake_app_server: unknown op {op!r}")


def main() -> None:
    script_path, log_path = sys.argv[1], sys.argv[2]
    with open(script_path, encoding="utf-8") as handle:
        steps = json.load(handle)
    fake = Fake(log_path)
    fake.record({"event": "started", "argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid()})
    env_probe = os.environ.get("FAKE_ENV_PROBE")
    if env_probe:
        fake.record({"event": "env", "env": {k: os.environ.get(k) for k in env_probe.split(",")}})
    for step in steps:
        fake.step(step)
    while not fake.eof and fake.read_frame() is not None:
        pass
    fake.record({"event": "eof"})


if __name__ == "__main__":
    main()
