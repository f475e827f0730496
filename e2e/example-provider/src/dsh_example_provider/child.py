"""The scripted child program the example provider runs (``python -m dsh_example_provider.child``).

It stands in for a real product the way a loopback model stands in for a real model:
its behaviour is scripted by one directive line in the task text (the contract kit's
``dsh-contract/1 <behaviour> <token>``). Without a directive it answers ``done``. When
the task also contains ``dsh-example/progress`` the child first reports progress the way
a product does while it works: a piece of text, a tool call and its token usage. With
``dsh-example/wait-for <name>`` it first notes its start in ``<ready dir>/<name>.starts``
and waits until ``<ready dir>/<name>`` exists: a product that answers only when the test
lets it (e.g. after a bound it must outlast). With ``dsh-example/write <name>`` it first
writes the task text into ``<name>`` in its cwd: a product editing its workspace.
``reach`` runs the task's ``dsh-contract/1 command <base64>`` with ``sh -c`` and answers
the token, then the command's output: a product's shell tool told what to run.

Wire protocol, one JSON object per line: the child writes ``{"type": "ready"}``; the
provider writes ``{"task": "..."}``; the child may report ``{"type": "text", "text": ...}``,
``{"type": "tool", "name": ..., "command": ...}`` and ``{"type": "usage",
"input_tokens": ..., "output_tokens": ...}``, then answers ``{"type": "final", "text":
...}`` or ``{"type": "error", "message": ...}`` (raw product text: the provider must
never copy it anywhere a model can see).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

_DIRECTIVE = re.compile(r"dsh-contract/1 (complete|fail|hold|reach) (T-[0-9a-f]{6,32})")
_COMMAND = re.compile(r"dsh-contract/1 command ([A-Za-z0-9_-]+={0,2})")
_PROGRESS = "dsh-example/progress"
_WAIT_FOR = re.compile(r"dsh-example/wait-for ([A-Za-z0-9_.-]+)")
_WRITE = re.compile(r"dsh-example/write ([A-Za-z0-9_.-]+)")

# What the child reports while it "works" on a task that asks for progress.
PROGRESS_SCRIPT: tuple[dict[str, str | int], ...] = (
    {"type": "text", "text": "Looking at the workspace."},
    {"type": "tool", "name": "Bash", "command": "ls -la"},
    {"type": "usage", "input_tokens": 1200, "output_tokens": 34},
)


def _send(message: dict[str, str | int]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _hold(token: str) -> None:
    # A grandchild makes the tree deeper than one process, as real products' trees are.
    subprocess.Popen(  # noqa: TID251 - this program plays the product; the host never runs it
        [sys.executable, "-c", "import time\nwhile True: time.sleep(60)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    ready_dir = os.environ.get("DSH_CONTRACT_READY_DIR")
    if ready_dir:
        (Path(ready_dir) / token).touch()
    sys.stdin.read()  # until the provider closes stdin or the tree is terminated


def _wait_for(name: str) -> None:
    ready = Path(os.environ.get("DSH_CONTRACT_READY_DIR") or ".")
    with (ready / f"{name}.starts").open("a", encoding="utf-8") as starts:
        starts.write("started\n")
    while not (ready / name).exists():
        time.sleep(0.05)  # this program plays the product: it may poll its own world


def _reach(task: str, token: str) -> str:
    """Run the task's command as a product's shell tool would; answer the token, then
    what it printed (the kit's confinement rules read it)."""
    found = _COMMAND.search(task)
    if found is None:
        return token
    command = base64.urlsafe_b64decode(found.group(1)).decode("utf-8")
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    return f"{token}\n{done.stdout.decode('utf-8', 'replace')[-2000:]}"


def main() -> int:
    """Run one scripted task."""
    _send({"type": "ready"})
    line = sys.stdin.readline()
    if not line:
        return 2
    task = str(json.loads(line).get("task", ""))
    gate = _WAIT_FOR.search(task)
    if gate is not None:
        _wait_for(gate.group(1))
    edit = _WRITE.search(task)
    if edit is not None:
        Path(edit.group(1)).write_text(task + "\n", encoding="utf-8")
    if _PROGRESS in task:
        for message in PROGRESS_SCRIPT:
            _send(message)
    match = _DIRECTIVE.search(task)
    if match is None:
        _send({"type": "final", "text": "done"})
        return 0
    behaviour, token = match.group(1), match.group(2)
    if behaviour == "complete":
        _send({"type": "final", "text": token})
        return 0
    if behaviour == "reach":
        _send({"type": "final", "text": _reach(task, token)})
        return 0
    if behaviour == "fail":
        sys.stderr.write(os.environ.get("DSH_CONTRACT_STDERR_TEXT", "child failed") + "\n")
        sys.stderr.flush()
        _send({"type": "error", "message": os.environ.get("DSH_CONTRACT_ERROR_TEXT", "failed")})
        return 3
    _hold(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
