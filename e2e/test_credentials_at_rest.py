"""No credential at rest: a layered secret never lands in a file a real product writes.

Each provider's product (the pinned Codex app-server, the bundled Claude Code CLI, the
codex-acp ACP agent) runs against its loopback model fixture with two unique random
values layered through the provider's ``env``: the product's own API key and an extra
``SERVICE_TOKEN``. The model first calls the product's shell tool (the moment products
capture their shell environment), then answers or holds the turn. After a **completed**
run, a **cancelled** run and a run whose **host was SIGKILLed** mid-turn, every file under
the run's root (``HOME``, the product home — ``CODEX_HOME`` or ``CLAUDE_CONFIG_DIR`` —
``TMPDIR``, the XDG dirs and the workspace) is read and must hold neither value; the
held runs are also scanned mid-turn. The product's environment is checked to really
carry the token, so a clean scan means "not written", not "never given".

Unfixed, Codex (app-server and codex-acp alike) writes every exported variable into
``CODEX_HOME/shell_snapshots/<thread>.<nonce>.sh`` (and a ``.tmp-`` file first); the
Codex provider's argv and the codex-acp ``args`` below turn shell snapshots off.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import psutil
import pytest
from acp_agent import codex_acp_or_skip
from dsh_contract_tests.fixtures import messages, responses
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    CancelController,
    ParentContext,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import SpawnSpec, spawn
from dsh_subprocess.testing import alive, host_descendants, wait_gone

pytestmark = [pytest.mark.keyless, pytest.mark.anyio]

HOST = str(Path(__file__).with_name("credential_host.py"))
TOKEN_NAME = "SERVICE_TOKEN"
TASK = "Run the tool, then answer."
ANSWER = "AT-REST-ANSWER"
ACP_MODEL = "gpt-5.4-mini"  # a slug codex-acp knows (an unknown one pollutes the answer)
# What codex-acp users are told to pass (README): codex-acp embeds Codex core, whose
# shell snapshots would otherwise persist the agent's environment.
CODEX_ACP_ARGS = ("-c", "features.shell_snapshot=false")
# Generous failure deadlines, never timings: a loaded 2-core runner must stay green.
DEADLINE = 90.0

Product = Literal["codex", "claude-code", "acp"]
PRODUCTS: tuple[Product, ...] = ("codex", "claude-code", "acp")


@pytest.fixture
def anyio_backend() -> str:
    # The ACP library is asyncio-only; one backend keeps the real-product runs cheap.
    return "asyncio"


@pytest.fixture(scope="module")
def codex_acp() -> str:
    """The native codex-acp binary, installed on demand by the project's script."""
    return codex_acp_or_skip()


@dataclass
class Secrets:
    """The two layered values; unique per test so a leftover of another run cannot match."""

    api_key: str = field(default_factory=lambda: f"sk-at-rest-{uuid.uuid4().hex}")
    token: str = field(default_factory=lambda: f"at-rest-token-{uuid.uuid4().hex}")

    def found_in(self, root: Path) -> list[str]:
        """``"<relative path>: <which>"`` for every file (or name) under ``root`` holding one.

        Every regular file is read whole (symlinks, sockets and FIFOs are named, not
        opened); a file or directory the product removes while a mid-turn scan walks is
        skipped, as ``os.walk`` skips a vanished directory.
        """
        needles = {"api key": self.api_key.encode(), TOKEN_NAME: self.token.encode()}
        found: list[str] = []
        for directory, dirs, files in os.walk(root):
            for name in sorted(dirs + files):
                path = Path(directory, name)
                relative = str(path.relative_to(root))
                data = relative.encode()
                try:
                    if stat.S_ISREG(path.lstat().st_mode):
                        data += b"\0" + path.read_bytes()
                except FileNotFoundError:
                    continue
                found += [f"{relative}: {which}" for which, n in needles.items() if n in data]
        return sorted(found)


@dataclass
class Setup:
    """One product wired to its loopback model, all its state under ``root``."""

    product: Product
    root: Path
    workspace: Path
    config: dict[str, Any]
    secrets: Secrets
    enqueue: Callable[..., None]
    wait_for_hold: Callable[[], None]
    requests: Callable[[], list[Any]]
    tool_call: object
    answer: object
    hold: object

    def provider(self) -> CodexProvider | ClaudeCodeProvider | AcpProvider:
        if self.product == "codex":
            return CodexProvider(CodexConfig(**self.config))
        if self.product == "claude-code":
            return ClaudeCodeProvider(ClaudeCodeConfig(**self.config))
        return AcpProvider(AcpConfig(**self.config))

    def product_used_the_key(self) -> bool:
        """The layered key reached the model fixture, so the product really held it."""
        for request in self.requests():
            if self.product == "claude-code":
                if request.headers.get("x-api-key") == self.secrets.api_key:
                    return True
            elif request.bearer_token == self.secrets.api_key:
                return True
        return False


def _codex_shell(command: str) -> responses.FunctionCall:
    # Versions advertise different shell tools; the fixture calls whichever is offered.
    return responses.FunctionCall(
        (
            ("exec_command", {"cmd": command}),
            ("shell_command", {"command": command}),
            ("shell", {"command": ["/bin/sh", "-c", command]}),
        )
    )


# The tool sleeps a second so that an unfixed Codex has long finished its snapshot
# (~0.4 s after thread start here) before the mid-turn scan and the host's death; with
# snapshots off nothing is written however long the turn lasts.
CODEX_TOOL_COMMAND = "sleep 1"


@pytest.fixture
def setup_for(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[Product], Setup]]:
    stack = contextlib.ExitStack()

    def make(product: Product) -> Setup:
        secrets = Secrets()
        root = tmp_path / "run"
        workspace = root / "workspace"
        workspace.mkdir(parents=True)
        if product == "claude-code":
            claude_model = stack.enter_context(messages.MessagesFixture())
            home = messages.keyless_claude_home(
                root, claude_model.base_url, api_key=secrets.api_key
            )
            env: dict[str, str | None] = dict(home.env)
            if os.geteuid() == 0:  # the CLI refuses the bypass as root outside a sandbox
                env["IS_SANDBOX"] = "1"
            env[TOKEN_NAME] = secrets.token
            return Setup(
                product,
                root,
                home.workspace,
                {"env": env, "permission_mode": "bypassPermissions", "dispose_grace": 2.0},
                secrets,
                claude_model.enqueue,
                lambda: claude_model.wait_for_holds(1, DEADLINE),
                claude_model.message_requests,
                messages.ToolUse("Bash", {"command": "true"}),
                messages.TextAnswer(ANSWER),
                messages.Hold(),
            )
        codex_model = stack.enter_context(responses.ResponsesFixture())
        codex_env: dict[str, str] = responses.codex_keyless_env(root, api_key=secrets.api_key)
        codex_env[TOKEN_NAME] = secrets.token
        config: dict[str, Any]
        if product == "codex":
            responses.write_codex_config(codex_env["CODEX_HOME"], codex_model.base_url)
            config = {"env": codex_env, "dispose_grace": 2.0}
        else:
            # Tools need danger-full-access under codex-acp: its read-only sandbox needs a
            # system bubblewrap.
            responses.write_codex_config(
                codex_env["CODEX_HOME"],
                codex_model.base_url,
                model=ACP_MODEL,
                sandbox_mode="danger-full-access",
            )
            codex_env["RUST_LOG"] = "warn"
            config = {
                "provider_name": "codex-acp",
                "command": request.getfixturevalue("codex_acp"),
                "args": list(CODEX_ACP_ARGS),
                "env": codex_env,
                "dispose_grace": 2.0,
            }
        return Setup(
            product,
            root,
            workspace,
            config,
            secrets,
            codex_model.enqueue,
            lambda: codex_model.wait_for_hold(DEADLINE),
            lambda: list(codex_model.requests),
            _codex_shell(CODEX_TOOL_COMMAND),
            responses.PlainAnswer(ANSWER),
            responses.Hold(),
        )

    with stack:
        yield make


def _request(setup: Setup, cancel: CancelController | None = None) -> SubagentStartRequest:
    return SubagentStartRequest(
        prompt=(TextBlock(text=TASK),),
        parent=ParentContext(session_id="at-rest", cwd=str(setup.workspace)),
        cancel=(cancel or CancelController()).signal,
    )


def _carries_the_token(procs: list[psutil.Process], token: str) -> bool:
    for proc in procs:
        try:
            if proc.environ().get(TOKEN_NAME) == token:
                return True
        except psutil.Error:  # exited, or not ours to read
            continue
    return False


@pytest.mark.parametrize("product", PRODUCTS)
async def test_nothing_at_rest_after_a_completed_run(
    product: Product, setup_for: Callable[[Product], Setup]
) -> None:
    setup = setup_for(product)
    setup.enqueue(setup.tool_call, setup.answer)
    provider = setup.provider()
    with anyio.fail_after(DEADLINE):
        async with SubagentService() as service:
            service.register_provider(provider)
            run = await service.start(provider.name, _request(setup))
            result: SubagentResult = await run.result()
            await run.dispose()
    assert (result.stop_reason, result.text) == (COMPLETED, ANSWER), result.diagnostic
    assert len(setup.requests()) == 2  # the tool ran, its output went back to the model
    assert setup.product_used_the_key()
    assert not host_descendants()
    assert setup.secrets.found_in(setup.root) == []


@pytest.mark.parametrize("product", PRODUCTS)
async def test_nothing_at_rest_in_a_kept_session_after_a_follow_up(
    product: Product, setup_for: Callable[[Product], Setup]
) -> None:
    """With continuation on, the product keeps the session on disk: the conversation is
    the product's to keep, a layered credential is not (the model never wrote it)."""
    setup = setup_for(product)
    setup.config["continuation"] = True
    setup.enqueue(setup.tool_call, setup.answer, setup.answer)
    provider = setup.provider()
    with anyio.fail_after(DEADLINE):
        async with SubagentService() as service:
            service.register_provider(provider)
            run = await service.start(provider.name, _request(setup))
            first = await run.result()
            await run.dispose()
            assert first.continuation is not None, first.diagnostic
            follow = _request(setup).model_copy(update={"resume": first.continuation})
            run = await service.start(provider.name, follow)
            second = await run.result()
            await run.dispose()
    assert (second.stop_reason, second.text) == (COMPLETED, ANSWER), second.diagnostic
    assert len(setup.requests()) == 3  # tool call, answer, then the follow-up's answer
    assert setup.product_used_the_key()
    assert not host_descendants()
    kept = [p for p in setup.root.rglob("*.jsonl") if p.is_file()]
    assert kept, "continuation keeps the session on disk"
    assert setup.secrets.found_in(setup.root) == []


@pytest.mark.parametrize("product", PRODUCTS)
async def test_nothing_at_rest_mid_turn_and_after_a_cancelled_run(
    product: Product, setup_for: Callable[[Product], Setup]
) -> None:
    setup = setup_for(product)
    setup.enqueue(setup.tool_call, setup.hold)
    provider = setup.provider()
    cancel = CancelController()
    with anyio.fail_after(DEADLINE):
        async with SubagentService() as service:
            service.register_provider(provider)
            run = await service.start(provider.name, _request(setup, cancel))
            await anyio.to_thread.run_sync(setup.wait_for_hold)  # the tool has run
            assert _carries_the_token(host_descendants(), setup.secrets.token)
            mid_turn = setup.secrets.found_in(setup.root)
            cancel.cancel()
            result = await run.result()
            await run.dispose()
    assert result.stop_reason == ABORTED
    assert setup.product_used_the_key()
    assert not host_descendants()
    assert {"mid-turn": mid_turn, "after": setup.secrets.found_in(setup.root)} == {
        "mid-turn": [],
        "after": [],
    }


# ``portable``: the host runs the guard macOS gets (forced), which must take the tree
# down as well: docs/platforms.md.
@pytest.mark.parametrize("guard", ["auto", "portable"])
@pytest.mark.parametrize("product", PRODUCTS)
async def test_nothing_at_rest_after_the_host_is_sigkilled_mid_turn(
    product: Product, setup_for: Callable[[Product], Setup], tmp_path: Path, guard: str
) -> None:
    setup = setup_for(product)
    setup.enqueue(setup.tool_call, setup.hold)
    ready = tmp_path / "host-ready.json"
    spec = tmp_path / "host-spec.json"
    spec.write_text(
        json.dumps(
            {
                "type": product,
                "config": setup.config,
                "workspace": str(setup.workspace),
                "ready": str(ready),
            }
        ),
        encoding="utf-8",
    )
    host_stderr: deque[str] = deque(maxlen=200)
    # Unguarded: the host's own death is what is being tested.
    host = await spawn(
        SpawnSpec(
            argv=(sys.executable, HOST, str(spec)),
            cwd=str(tmp_path),
            stdin="devnull",
            stdout="devnull",
            host_death_guard=False,
            grace=0.5,
            env={"DSH_SUBPROCESS_GUARD": guard},
        ),
        stderr_observer=host_stderr.append,
    )
    try:
        with anyio.fail_after(DEADLINE):
            while not ready.exists() and host.exit_facts is None:  # noqa: ASYNC110 - written by another process
                await anyio.sleep(0.02)
        assert host.exit_facts is None, "\n".join(host_stderr)
        await anyio.to_thread.run_sync(setup.wait_for_hold)  # the tool has run
        tree = psutil.Process(host.pid).children(recursive=True)
        assert _carries_the_token(tree, setup.secrets.token)
        guards = [p for p in tree if any(a.endswith("_portable_guard.py") for a in p.cmdline())]
        assert bool(guards) == (guard == "portable" or sys.platform != "linux")
        mid_turn = setup.secrets.found_in(setup.root)
        os.kill(host.pid, signal.SIGKILL)
        await host.wait()
        survivors = await anyio.to_thread.run_sync(wait_gone, tree, DEADLINE)
    finally:
        await host.terminate()
    print(f"\n{product}: host SIGKILL -> {len(survivors)} survivors of {len(tree)} processes")
    assert survivors == [], [f"{p.pid} {p.name()}" for p in alive(survivors)]
    assert setup.product_used_the_key()
    assert {"mid-turn": mid_turn, "after": setup.secrets.found_in(setup.root)} == {
        "mid-turn": [],
        "after": [],
    }


def test_the_scan_finds_a_secret_in_any_file_or_name(tmp_path: Path) -> None:
    secrets = Secrets()
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "snapshot.tmp-1").write_bytes(b"\x00export K='" + secrets.api_key.encode() + b"'")
    (tmp_path / f"named-{secrets.token}").write_text("")
    os.mkfifo(tmp_path / "fifo")  # named, never opened (a read would block)
    (tmp_path / "link").symlink_to(nested / "snapshot.tmp-1")
    assert secrets.found_in(tmp_path) == [
        "a/b/snapshot.tmp-1: api key",
        f"named-{secrets.token}: {TOKEN_NAME}",
    ]
    assert Secrets().found_in(tmp_path) == []
