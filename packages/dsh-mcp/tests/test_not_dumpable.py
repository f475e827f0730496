"""``dsh mcp`` and ``dsh-mcp`` keep their environment from same-user processes (Linux).

The server runs without capabilities (``unprivileged``: root's ``CAP_SYS_PTRACE`` reads
a not-dumpable process anyway) with a planted secret in its environment. Once it has
answered ``initialize`` (so its start-up is over), a capability-less reader tries its
``/proc/<pid>/environ``: refused, unless ``DSH_KEEP_DUMPABLE=1`` as ``docs/cli.md`` shows,
which is the twin that reads the secret (so the refusal can fail).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from unprivileged import unprivileged

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux: /proc, not dumpable")

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
PROFILE = (
    '[[providers]]\ntype = "example"\n\n'
    '[[tools]]\nname = "subagent_example"\nprovider = "example"\nbackground_mode = "disabled"\n'
)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "not-dumpable-test", "version": "0"},
    },
}


def _documented_setting() -> tuple[str, str]:
    """The ``export NAME=VALUE`` line docs/cli.md tells a user to paste."""
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    found = re.search(r"^export (DSH_[A-Z_]+)=(\S+)", page, re.M)
    assert found is not None, "docs/cli.md shows how to keep dsh debuggable"
    return found.group(1), found.group(2)


def _environ_as_same_user(pid: int, secret: str) -> str:
    done = subprocess.run(
        unprivileged(["cat", f"/proc/{pid}/environ"]), capture_output=True, check=False
    )
    if done.returncode != 0:
        return done.stderr.decode().strip().rsplit(": ", 1)[-1]
    return "secret" if secret.encode() in done.stdout else "read"


@pytest.mark.parametrize("command", [("dsh", "mcp"), ("dsh-mcp",)], ids=["dsh-mcp-sub", "dsh-mcp"])
@pytest.mark.parametrize("keep", [False, True], ids=["default", "kept-dumpable"])
def test_the_mcp_server_refuses_its_environ_unless_kept_dumpable(
    command: tuple[str, ...], keep: bool, tmp_path: Path
) -> None:
    secret = f"mcp-secret-{uuid.uuid4().hex}"
    profile = tmp_path / "profile.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    env = {**os.environ, "OPENAI_API_KEY": secret, "HOME": str(tmp_path)}
    if keep:
        name, value = _documented_setting()
        env[name] = value
    argv = [str(BIN / command[0]), *command[1:], str(profile), "--workspace", str(tmp_path)]
    server = subprocess.Popen(  # noqa: TID251 - the command as a client starts it
        unprivileged(argv),
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())  # the event: start-up is over
        assert answer["id"] == 1, answer
        seen = _environ_as_same_user(server.pid, secret)
    finally:
        server.stdin.close()  # EOF: the server ends
        server.wait(timeout=60)
        server.stdout.close()
        assert server.stderr is not None
        server.stderr.close()
    assert server.returncode == 0
    assert seen == ("secret" if keep else "Permission denied")
