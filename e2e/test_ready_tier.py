"""Ready-products tier: the REAL Codex, Claude Code and codex-acp kept ready (``warm``).

Each product answers from its loopback model fixture. The kit's ``ready:*`` rules
(docs/rules.md) are checked on the real products: a delegation on a ready product gives
the cold one's result, diagnostic, usage and progress; a ready product serves one
delegation (its pid never serves another); one killed while idle leaves the next
delegation to a cold start that completes (counted); closing the service and killing
the host outright (SIGKILL) each leave no process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from acp_agent import codex_acp_or_skip
from dsh_contract_tests.fixtures.messages import (
    MessagesFixture,
    TextAnswer,
    ToolUse,
    keyless_claude_home,
)
from dsh_contract_tests.fixtures.responses import (
    FunctionCall,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    ParentContext,
    ProgressEvent,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent.ready import ReadyPool
from dsh_subprocess import SpawnSpec, spawn
from dsh_subprocess.testing import host_descendants, wait_gone

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

ANSWER = "READY_TIER_ANSWER"
TASK = "Reply with the answer."
PRODUCTS = ("codex", "claude-code", "codex-acp")
HOST = str(Path(__file__).with_name("ready_host.py"))
DEADLINE = 180.0
sys.path.insert(0, str(Path(__file__).parent))
from ready_host import provider_of  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the acp library is asyncio-only; one backend keeps the cores free


@dataclass
class Setup:
    product: str
    config: dict[str, Any]
    """The instance as JSON (``warm`` added per test)."""
    workspace: Path


@contextmanager
def _codex(root: Path) -> Iterator[Setup]:
    with ResponsesFixture([PlainAnswer(ANSWER)] * 12) as fixture:
        env = codex_keyless_env(root)
        write_codex_config(env["CODEX_HOME"], fixture.base_url)
        workspace = root / "workspace"
        workspace.mkdir()
        yield Setup("codex", {"env": env}, workspace)


@contextmanager
def _claude(root: Path) -> Iterator[Setup]:
    with MessagesFixture(default=TextAnswer(ANSWER)) as fixture:
        home = keyless_claude_home(root, fixture.base_url)
        yield Setup("claude-code", {"env": dict(home.env)}, home.workspace)


@contextmanager
def _codex_acp(root: Path) -> Iterator[Setup]:
    command = codex_acp_or_skip()
    with ResponsesFixture([PlainAnswer(ANSWER)] * 12) as fixture:
        env = codex_keyless_env(root)
        write_codex_config(
            env["CODEX_HOME"],
            fixture.base_url,
            approval_policy="never",
            sandbox_mode="danger-full-access",
        )
        workspace = root / "workspace"
        workspace.mkdir()
        config = {
            "provider_name": "codex-acp",
            "command": command,
            "args": ["-c", "features.shell_snapshot=false"],
            "env": {**env, "RUST_LOG": "warn"},
            "dispose_eof_grace": 0.2,
        }
        yield Setup("codex-acp", config, workspace)


def _setup(product: str, root: Path) -> AbstractContextManager[Setup]:
    return {"codex": _codex, "claude-code": _claude, "codex-acp": _codex_acp}[product](root)


@asynccontextmanager
async def _service(setup: Setup, **instances: int) -> AsyncIterator[SubagentService]:
    """A service with one instance per keyword (its name: its ``warm``)."""
    async with SubagentService() as service:
        for name, warm in instances.items():
            config = {**setup.config, "provider_name": name, "warm": warm}
            service.register_provider(provider_of(setup.product, config))
        yield service


async def _delegate(
    service: SubagentService, name: str, cwd: Path
) -> tuple[SubagentResult, list[ProgressEvent]]:
    request = SubagentStartRequest(
        prompt=(TextBlock(text=TASK),), parent=ParentContext(session_id="p", cwd=str(cwd))
    )
    run = await service.start(name, request)
    with anyio.fail_after(DEADLINE):
        events = [event async for event in run.progress]
        result = await run.result()
    await run.dispose()
    return result, events


async def _ready(service: SubagentService, name: str, cwd: Path) -> ReadyPool:
    assert service.keep_ready(name, str(cwd))
    pool = service.ready_pool(name)
    assert pool is not None
    with anyio.fail_after(DEADLINE):
        assert await pool.wait_ready(), "the product never got ready"
    return pool


def _shape(result: SubagentResult, events: list[ProgressEvent]) -> tuple[Any, ...]:
    return (
        result.stop_reason,
        result.text,
        result.diagnostic,
        result.usage,
        [event.model_dump(exclude={"id", "call_id"}) for event in events],
    )


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_ready_delegation_is_a_cold_one_and_each_product_serves_one(
    product: str, tmp_path: Path
) -> None:
    with _setup(product, tmp_path) as setup:
        async with _service(setup, cold=0, ready=1) as service:
            pool = await _ready(service, "ready", setup.workspace)
            served: list[int] = []
            for _ in range(2):
                assert await pool.wait_ready()
                (child,) = pool.idle
                served.append(child.process.pid)
                ready = await _delegate(service, "ready", setup.workspace)
                # ready:one-delegation-per-product: the tree that served it is gone.
                assert not child.process.tree_alive()
            cold = await _delegate(service, "cold", setup.workspace)
            assert (pool.stats.claimed, pool.stats.cold) == (2, 0)
        print(f"\n{product}: ready pids {served}; result {_shape(*ready)}")
        assert len(set(served)) == 2
        assert _shape(*ready) == _shape(*cold)
        assert ready[0].text.endswith(ANSWER)
    assert host_descendants() == []  # ready:close-leaves-nothing (the replacement too)


@pytest.mark.parametrize("product", PRODUCTS)
async def test_a_ready_product_killed_while_idle_leaves_the_delegation_to_a_cold_start(
    product: str, tmp_path: Path
) -> None:
    with _setup(product, tmp_path) as setup:
        async with _service(setup, ready=1) as service:
            pool = await _ready(service, "ready", setup.workspace)
            (child,) = pool.idle
            os.kill(child.process.pid, signal.SIGKILL)
            await child.process.wait()
            result, _ = await _delegate(service, "ready", setup.workspace)
            assert result.stop_reason == "completed", result.diagnostic
            assert result.text.endswith(ANSWER)  # codex-acp prefixes a model-metadata notice
            assert (pool.stats.fallbacks, pool.stats.cold, pool.stats.claimed) == (1, 1, 0)
    assert host_descendants() == []


@pytest.mark.parametrize("product", PRODUCTS)
async def test_host_killed_with_ready_products_idle_leaves_no_survivor(
    product: str, tmp_path: Path
) -> None:
    with _setup(product, tmp_path) as setup:
        ready = tmp_path / "ready.json"
        spec = tmp_path / "spec.json"
        config = {**setup.config, "warm": 2}
        spec.write_text(
            json.dumps(
                {
                    "product": product,
                    "config": config,
                    "cwd": str(setup.workspace),
                    "ready": str(ready),
                }
            ),
            encoding="utf-8",
        )
        # Unguarded: the host's own death is what is being tested.
        host = await spawn(
            SpawnSpec(
                argv=(sys.executable, HOST, str(spec)),
                cwd=str(tmp_path),
                stdin="devnull",
                stdout="devnull",
                host_death_guard=False,
                grace=0.5,
            )
        )
        try:
            with anyio.fail_after(DEADLINE):
                while not ready.exists() and host.exit_facts is None:  # noqa: ASYNC110 - written by another process
                    await anyio.sleep(0.05)
            assert host.exit_facts is None, "the host ended before its products were ready"
            reported = json.loads(ready.read_text(encoding="utf-8"))["pids"]
            tree = psutil.Process(host.pid).children(recursive=True)
            assert {p.pid for p in tree} >= set(reported)
            os.kill(host.pid, signal.SIGKILL)
            await host.wait()
            survivors = await anyio.to_thread.run_sync(wait_gone, tree, DEADLINE)
        finally:
            await host.terminate()
    assert len(reported) >= 2
    assert survivors == []


async def test_a_ready_claude_code_answered_the_sdk_initialize_before_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's handshake goes ahead: the ready CLI answered ``initialize`` before the
    task was submitted, and then got only the prompt; a cold CLI gets the same frames
    (``initialize``, then the same user message), both after the task."""
    from dsh_subagent import ProductChild
    from dsh_subagent_claude_code.ahead import Connected

    sent: list[tuple[int, dict[str, Any]]] = []  # (the CLI's pid, a frame written to it)
    send = ProductChild.send

    async def recording(self: ProductChild, data: bytes) -> None:
        sent.append((self.process.pid, json.loads(data)))
        await send(self, data)

    monkeypatch.setattr(ProductChild, "send", recording)

    def frames(pid: int) -> list[dict[str, Any]]:
        return [frame for who, frame in sent if who == pid]

    def shape(frame: dict[str, Any]) -> Any:
        # The request id is drawn per request; everything else is the wire.
        return {**frame, "request_id": None} if "request_id" in frame else frame

    with _setup("claude-code", tmp_path) as setup:
        async with _service(setup, cold=0, ready=1) as service:
            pool = await _ready(service, "ready", setup.workspace)
            (child,) = pool.idle
            ready_pid = child.process.pid
            assert isinstance(child.state, Connected)
            # The real CLI's answer to initialize (its commands, models, account...).
            info = await child.state.client.get_server_info()
            assert info is not None
            assert "commands" in info
            before = frames(ready_pid)
            ready = await _delegate(service, "ready", setup.workspace)
            after = frames(ready_pid)[len(before) :]
            cold = await _delegate(service, "cold", setup.workspace)
            assert pool.stats.claimed == 1
    # The cold CLI is the other one handed a prompt (the replacement never was).
    prompted = {who for who, frame in sent if frame["type"] == "user"}
    (cold_pid,) = prompted - {ready_pid}
    assert [f["request"]["subtype"] for f in before] == ["initialize"]
    assert [f["type"] for f in after] == ["user"]
    assert after[0]["message"]["content"] == TASK
    cold_frames = frames(cold_pid)
    assert [shape(f) for f in cold_frames] == [shape(f) for f in before + after]
    assert _shape(*ready) == _shape(*cold)
    assert host_descendants() == []


@contextmanager
def _editing(product: str, root: Path) -> Iterator[tuple[dict[str, Any], Path, Any]]:
    """An instance whose model writes ``edited`` into a file named per delegation:
    ``(config, workspace, edit(where, name))``, ``edit`` scripting the next delegation."""
    if product == "codex":
        with ResponsesFixture() as codex:
            env = codex_keyless_env(root)
            write_codex_config(env["CODEX_HOME"], codex.base_url)
            workspace = root / "workspace"
            workspace.mkdir()

            def shell(where: str, name: str) -> None:
                command = f"printf 'edited\\n' > {name}"  # in the product's cwd
                call = FunctionCall((("exec_command", {"cmd": command}),), call_id=f"c-{name}")
                codex.enqueue(call, PlainAnswer(ANSWER))

            mode = "dangerously-bypass-approvals-and-sandbox"  # confinement: the default
            yield {"env": env, "permission_mode": mode}, workspace, shell
        return
    with MessagesFixture(default=TextAnswer(ANSWER)) as claude:
        home = keyless_claude_home(root, claude.base_url)

        def write(where: str, name: str) -> None:
            path = f"{where}/{name}"
            claude.enqueue(ToolUse("Write", {"file_path": path, "content": "edited\n"}))
            claude.enqueue(TextAnswer(ANSWER))

        yield {"env": dict(home.env), "permission_mode": "acceptEdits"}, home.workspace, write


@pytest.mark.parametrize("product", ["claude-code", "codex"])
async def test_an_isolated_delegation_claims_the_product_made_for_its_pooled_worktree(
    product: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code fixes its cwd at spawn, and under the default confinement every product
    does (its write rule names the cwd): with
    a warm worktree pool, the ready product is spawned in the idle worktree handed out
    next, and the delegation that claims that worktree runs on it; its edit is committed
    on its branch as a cold delegation's is (the next product killed while idle: a cold
    start in its worktree). Closing leaves no product."""
    from dsh_subprocess import ManagedProcess, StderrObserver
    from dsh_worktree import Worktree
    from dsh_worktree._git import git
    from dsh_worktree.testing import private_git_env, scratch_repository

    for name, value in private_git_env(tmp_path / "git-home").items():
        monkeypatch.setenv(name, value)
    worktrees = tmp_path / "worktrees"
    with _editing(product, tmp_path) as (config, workspace, edit):
        repo = scratch_repository(workspace / "repo")
        inner = provider_of(product, {**config, "warm": 1})
        spawned: list[str] = []
        spawn_product = inner.spawn

        async def recording(spec: SpawnSpec, observer: StderrObserver) -> ManagedProcess:
            spawned.append(spec.cwd or "")
            return await spawn_product(spec, observer)

        monkeypatch.setattr(inner, "spawn", recording)
        isolated = Worktree(warm=2, root=str(worktrees)).isolate(inner)
        runs: list[tuple[SubagentResult, str]] = []
        async with isolated, SubagentService() as service:
            service.register_provider(isolated)
            await isolated.prewarm(str(repo))
            assert service.keep_ready(inner.name, str(repo))
            pool = service.ready_pool(inner.name)
            assert pool is not None
            for round_, kill in enumerate((False, True)):
                with anyio.fail_after(DEADLINE):
                    await isolated.wait_settled()  # the worktree handed out next is idle
                    assert await pool.wait_ready(), "no product got ready"
                (child,) = pool.idle
                where = child.cwd
                assert Path(where).parent.parent == worktrees  # <root>/<repository>/<id>
                assert spawned[-1] == where  # spawned there, before any claim
                if kill:
                    os.kill(child.process.pid, signal.SIGKILL)
                    await child.process.wait()
                name = f"edit-{round_}.txt"
                edit(where, name)
                result, _ = await _delegate(service, inner.name, repo)
                assert not child.process.tree_alive()  # served one delegation, or was killed
                runs.append((result, name))
            assert (pool.stats.claimed, pool.stats.fallbacks, pool.stats.cold) == (1, 1, 1)
    for result, name in runs:
        assert result.stop_reason == "completed", result.diagnostic
        assert result.text.endswith(ANSWER)
        changes = result.changes
        assert changes is not None
        assert changes.commit is not None
        assert changes.branch
        shown = await git(str(repo), "show", f"{changes.commit}:{name}")
        assert shown.stdout == "edited\n"  # the run worked in the product's worktree
    (ready, _), (cold, _) = runs
    assert ready.changes is not None
    assert cold.changes is not None
    assert (ready.changes.files_changed, ready.changes.insertions) == (1, 1)
    assert (cold.changes.files_changed, cold.changes.insertions) == (1, 1)
    assert ready.changes.branch != cold.changes.branch
    assert host_descendants() == []  # closing ended the product kept for the idle worktree


def _guide_block() -> str:
    """The Python block of docs/harness.md's "Ready products" section."""
    page = (Path(__file__).parents[1] / "docs" / "harness.md").read_text(encoding="utf-8")
    section = page.split("## Ready products", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_guides_ready_products_block_runs_on_the_real_codex(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from dsh_subagent import delegate
    from dsh_subagent_codex import CodexConfig, CodexProvider

    def later(call: Any) -> Any:
        async def after_the_pool_is_ready(subagents: SubagentService, *args: Any, **kw: Any) -> Any:
            # The block's "Later": the task comes once the product is ready.
            pool = subagents.ready_pool(kw["provider"])
            assert pool is not None
            with anyio.fail_after(DEADLINE):
                assert await pool.wait_ready()
            return await call(subagents, *args, **kw)

        return after_the_pool_is_ready

    with _setup("codex", tmp_path) as setup:
        env = setup.config["env"]
        namespace: dict[str, Any] = {
            "SubagentService": SubagentService,
            "CodexProvider": CodexProvider,
            # The block's configuration, pointed at the loopback model (the only change).
            "CodexConfig": lambda **fields: CodexConfig(env=env, **fields),
            "delegate": later(delegate),
            "session": SimpleNamespace(workspace=str(setup.workspace)),
            "task": TASK,
        }
        body = "".join(f"    {line}\n" for line in _guide_block().splitlines())
        exec(f"async def block():\n{body}", namespace)
        printed: list[str] = []
        namespace["print"] = lambda *args: printed.append(" ".join(map(str, args)))
        await namespace["block"]()
    assert printed
    assert printed[0].startswith(ANSWER)
    assert "claimed=1" in printed[0]  # keep_ready made the first delegation a ready one
    assert host_descendants() == []
