"""Shared pieces of the dsh-mcp tests: a sandbox, profiles and a real server session.

Every server is the real ``dsh mcp`` console script started by the official MCP client
(``mcp.client.stdio.stdio_client``) over a real stdio pipe, with a temporary HOME,
CODEX_HOME, CLAUDE_CONFIG_DIR and TMPDIR. The product is the example provider's scripted
child (``dsh-contract/1 <complete|fail|hold> <token>``): it answers the token, fails, or
holds with a grandchild until its tree is torn down, and touches ``<ready>/<token>``
once it holds.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp_types as types
import psutil
from mcp import ClientSession
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client

DSH = Path(sys.executable).with_name("dsh")

EXAMPLE_PROFILE = """
[[providers]]
type = "example"
pass_env = ["DSH_CONTRACT_READY_DIR"]

[[tools]]
name = "subagent_example"
provider = "example"

[jobs]
"""


@dataclass
class Sandbox:
    """A temporary root with product homes, a workspace and the ready directory."""

    root: Path
    env: dict[str, str]
    workspace: Path
    ready: Path
    stderr: Path

    def profile(self, mcp: str | None = 'workspace = "workspace"', extra: str = "") -> Path:
        """The example profile, with an ``[mcp]`` table when ``mcp`` is given."""
        path = self.root / f"profile-{uuid.uuid4().hex[:8]}.toml"
        # The child touches its ready file outside the workspace: confined (the default),
        # the instance adds that directory.
        grant = f"config = {{ confinement = {{ write = [{json.dumps(str(self.ready))}] }} }}\n"
        text = EXAMPLE_PROFILE.replace("[[tools]]", grant + "\n[[tools]]", 1) + extra
        if mcp is not None:
            text += f"\n[mcp]\n{mcp}\n"
        path.write_text(text, encoding="utf-8")
        return path

    def token(self) -> str:
        return "T-" + uuid.uuid4().hex[:12]

    def wait_ready(self, token: str, timeout: float = 60.0) -> None:
        """Block until the held child announced itself (the event the tests wait on)."""
        marker = self.ready / token
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the child holding {token} never became ready")
            time.sleep(0.01)

    def server_stderr(self) -> str:
        return self.stderr.read_text(encoding="utf-8") if self.stderr.exists() else ""


def hold(token: str) -> dict[str, object]:
    return {"description": "hold", "prompt": f"dsh-contract/1 hold {token}"}


def complete(token: str, **extra: object) -> dict[str, object]:
    return {"description": "answer", "prompt": f"dsh-contract/1 complete {token}", **extra}


def make_sandbox(tmp_path: Path) -> Sandbox:
    """A fresh sandbox under ``tmp_path``."""
    assert DSH.is_file(), f"the dsh console script is missing next to {sys.executable}"
    env: dict[str, str] = {}
    for name in ("HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "TMPDIR"):
        path = tmp_path / name.lower()
        path.mkdir()
        env[name] = str(path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    ready = tmp_path / "ready"
    ready.mkdir()
    env.update(
        DSH_CONTRACT_READY_DIR=str(ready),
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        ALL_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
        PYTHONUNBUFFERED="1",
    )
    return Sandbox(tmp_path, env, workspace, ready, tmp_path / "server-stderr.txt")


@dataclass
class Client:
    """What the test's MCP client received besides results."""

    session: ClientSession
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    roots_asked: int = 0

    async def wait_log(
        self, predicate: Callable[[types.LoggingMessageNotificationParams], bool]
    ) -> types.LoggingMessageNotificationParams:
        """The first log entry matching ``predicate``, waiting for it (bounded by 60 s)."""
        with anyio.fail_after(60):
            while True:
                for entry in self.logs:
                    if predicate(entry):
                        return entry
                await anyio.sleep(0.01)


def server_params(box: Sandbox, profile: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(DSH), args=["mcp", str(profile), *args], env=box.env, cwd=str(box.root)
    )


@asynccontextmanager
async def serve(
    box: Sandbox, profile: Path, *args: str, roots: list[Path] | None = None
) -> AsyncIterator[Client]:
    """A real ``dsh mcp`` server process and an initialised official client session."""
    holder: list[Client] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        holder[0].logs.append(params)

    async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
        holder[0].roots_asked += 1
        assert roots is not None
        return types.ListRootsResult(
            roots=[types.Root(uri=path.as_uri(), name=path.name) for path in roots]
        )

    with box.stderr.open("a", encoding="utf-8") as errlog:
        async with (
            stdio_client(server_params(box, profile, *args), errlog=errlog) as (read, write),
            ClientSession(
                read,
                write,
                logging_callback=on_log,
                list_roots_callback=list_roots if roots is not None else None,
            ) as session,
        ):
            holder.append(Client(session))
            await session.initialize()
            yield holder[0]


def is_guard(argv: tuple[str, ...] | list[str]) -> bool:
    """Whether a command line is dsh-subprocess's guard (plumbing, not a product)."""
    return any(arg.endswith("_guard.py") for arg in argv)


def server_process(parent_pid: int | None = None) -> psutil.Process:
    """The ``dsh mcp`` process among this test process's children."""
    me = psutil.Process(parent_pid or os.getpid())
    for child in me.children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if [str(DSH), "mcp"] in (cmdline[:2], cmdline[1:3]):
            return child
    raise LookupError("no dsh mcp process found")
