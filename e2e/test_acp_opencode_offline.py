"""The real opencode, installed and run as docs/agents.md says: no network, no host HOME.

Opt-in with the known ACP agents (``DSH_TEST_ACP_AGENTS=1``):

* ``scripts/install-acp-agent opencode`` with a fresh HOME and agents folder leaves HOME
  empty (npm's cache and logs stay in the agents folder, opencode's postinstall, which
  ran the binary against HOME, is skipped) and gives the entry the profile runs;
* a keyless run of the shipped profile (a shell tool, then the answer) with every proxy
  variable pointing at a loopback listener that records each connection: the listener
  sees none (without ``npm_config_offline`` it saw two ``CONNECT registry.npmjs.org:443``
  on the first run), opencode's config folder gets no npm install, and opencode's folders
  in this process's real HOME are as they were.

What this can see, honestly: a connection that honours the proxy variables (opencode's
runtime and its npm client do), and files. A direct socket that ignores them would go
unseen; the model fixture is on loopback and reached through ``NO_PROXY``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from acp_agent import AGENTS_DIR, INSTALLER, agent_or_skip
from acp_keyless import ModelFixture, ShellThenAnswer, agent_config
from dsh_subagent import (
    COMPLETED,
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_acp import AcpProvider, agent_profile
from dsh_subprocess.testing import host_descendants

pytestmark = [pytest.mark.keyless, pytest.mark.anyio]

AGENT = "opencode"
REGISTRY_UNREACHABLE = 3
ANSWER = "OPENCODE-OFFLINE-ANSWER"
# opencode's folders under a HOME (XDG defaults), checked in this process's real HOME.
HOME_FOLDERS = (
    ".config/opencode",
    ".local/share/opencode",
    ".local/state/opencode",
    ".cache/opencode",
    ".opencode",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ACP library is asyncio-only


class _Recorder:
    """A loopback "proxy" that records each connection's first line and refuses it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(5)
                try:
                    self.lines.append(conn.recv(4096).split(b"\r\n")[0])
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    self.lines.append(b"<no request>")

    def close(self) -> None:
        self._server.close()
        self._thread.join(5)


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    listener = _Recorder()
    yield listener
    listener.close()


def _snapshot(home: Path) -> dict[str, float]:
    """Every path under opencode's folders in ``home``, with its modification time."""
    seen: dict[str, float] = {}
    for folder in HOME_FOLDERS:
        root = home / folder
        if root.exists():
            for path in [root, *root.rglob("*")]:
                seen[str(path)] = path.lstat().st_mtime
    return seen


def test_the_installer_leaves_home_untouched(tmp_path: Path) -> None:
    agent_or_skip(AGENT)  # the registry is reachable (else a visible skip)
    home, agents = tmp_path / "home", tmp_path / "agents"
    home.mkdir()
    agents.mkdir()
    if (AGENTS_DIR / ".npm-cache").is_dir():
        # The checkout's warm npm cache, linked: the install then needs no download.
        shutil.copytree(AGENTS_DIR / ".npm-cache", agents / ".npm-cache", copy_function=os.link)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(home), DSH_ACP_AGENTS_DIR=str(agents), TMPDIR=str(tmp_path))
    done = subprocess.run(
        [str(INSTALLER), AGENT],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode == REGISTRY_UNREACHABLE:
        pytest.skip(f"npm registry unreachable: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    profile = agent_profile(AGENT)
    prefix = agents / f"{AGENT}-{profile.version}"
    assert done.stdout == f"{prefix / profile.entry}\n"
    assert profile.entry_in(prefix) == prefix / profile.entry
    assert sorted(home.iterdir()) == []  # no ~/.npm, no opencode folders
    # The postinstall never ran: it would have put the binary in place of the shim's stub.
    stub = prefix / "node_modules/opencode-ai/bin/opencode.exe"
    assert stub.stat().st_size < (prefix / profile.entry).stat().st_size


async def test_a_run_reaches_no_network_and_writes_only_under_its_root(
    tmp_path: Path, recorder: _Recorder
) -> None:
    entry = agent_or_skip(AGENT)
    real_home = Path(os.environ["HOME"])
    before = _snapshot(real_home)
    root = tmp_path / "run"
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    proxies = {
        name: recorder.url
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")
    }
    loopback = "127.0.0.1,localhost"
    route = ShellThenAnswer("chat-completions", f"touch marker-{uuid.uuid4().hex}", ANSWER)
    with ModelFixture("chat-completions", route=route) as model:
        config = agent_config(
            AGENT,
            entry,
            root,
            model,
            env={**proxies, "NO_PROXY": loopback, "no_proxy": loopback},
            permission="allow",
        )
        with anyio.fail_after(120):
            async with SubagentService() as service:
                service.register_provider(AcpProvider(config))
                run = await service.start(
                    AGENT,
                    SubagentStartRequest(
                        prompt=(TextBlock(text="Run the tool, then answer."),),
                        parent=ParentContext(session_id="offline", cwd=str(workspace)),
                    ),
                )
                result: SubagentResult = await run.result()
                await run.dispose()
    assert (result.stop_reason, result.text) == (COMPLETED, ANSWER), result.diagnostic
    assert list(workspace.glob("marker-*")), "the shell tool never ran"
    assert recorder.lines == []  # no connection left loopback through a proxy
    config_dir = root / "xdg" / "config" / "opencode"
    assert config_dir.is_dir()
    assert sorted(p.name for p in config_dir.iterdir() if p.name != ".gitignore") == []
    assert _snapshot(real_home) == before
    assert host_descendants() == []
