"""A tiny product for the runtime tests: JSON lines on stdio, scripted by the task text.

It says ``{"type": "ready"}`` (unless the task's first word is ``silent-open``), reads
``{"task": ...}`` and acts on the task's first word:

* ``answer <text>`` → ``{"type": "final", "text": <text>}``;
* ``stderr <text>`` → writes ``<text>`` on stderr, then answers ``ok``;
* ``partial <text>`` → ``{"type": "partial", "text": <text>}``, then waits for EOF;
* ``exit <code>`` → exits with that code;
* ``report <category> <code>`` → ``{"type": "failed", "category": <category>}`` (the
  product reports its own failure), then exits with that code;
* ``long <bytes>`` → writes that many bytes without a newline, then waits for EOF;
* ``garbage`` → a line that is not JSON, then answers ``after garbage``;
* ``bad-hello`` → the handshake line is ``{"type": "nope"}``;
* ``usage <in> <out>`` → ``{"type": "usage", ...}``, then answers ``counted``;
* ``reach <path>`` → reads ``path`` and answers its text, or ``denied <errno name>``;
* ``tmpdir`` → answers its ``TMPDIR`` after writing a file there;
* ``home <path>`` → makes ``<path>/state`` (as Codex makes its state in its home) and
  answers ``made``, or ``denied <errno name>``.
"""

from __future__ import annotations

import errno
import json
import os
import sys


def _send(message: dict[str, str]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    if first == "silent-open":
        sys.stdin.read()
        return 0
    _send({"type": "nope"} if first == "bad-hello" else {"type": "ready"})
    line = sys.stdin.readline()
    if not line:
        return 2
    word, _, rest = str(json.loads(line)["task"]).partition(" ")
    if word == "answer":
        _send({"type": "final", "text": rest})
    elif word == "stderr":
        sys.stderr.write(rest + "\n")
        sys.stderr.flush()
        _send({"type": "final", "text": "ok"})
    elif word == "partial":
        _send({"type": "partial", "text": rest})
        sys.stdin.read()
    elif word == "exit":
        return int(rest)
    elif word == "report":
        category, code = rest.split()
        _send({"type": "failed", "category": category})
        return int(code)
    elif word == "long":
        sys.stdout.write("x" * int(rest))
        sys.stdout.flush()
        sys.stdin.read()
    elif word == "usage":
        tokens_in, tokens_out = rest.split()
        _send({"type": "usage", "input": tokens_in, "output": tokens_out})
        _send({"type": "final", "text": "counted"})
    elif word == "reach":
        try:
            with open(rest, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            text = f"denied {errno.errorcode.get(exc.errno or 0, '?')}"
        _send({"type": "final", "text": text})
    elif word == "tmpdir":
        where = os.environ.get("TMPDIR", "")
        with open(os.path.join(where, "scratch.txt"), "w", encoding="utf-8") as handle:
            handle.write("kept until the tree exits")
        _send({"type": "final", "text": where})
    elif word == "home":
        try:
            os.makedirs(os.path.join(rest, "state"))
            text = "made"
        except OSError as exc:
            text = f"denied {errno.errorcode.get(exc.errno or 0, '?')}"
        _send({"type": "final", "text": text})
    elif word == "garbage":
        sys.stdout.write("this is not json\n")
        _send({"type": "final", "text": "after garbage"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
