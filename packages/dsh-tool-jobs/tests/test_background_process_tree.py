"""A real process tree in the background: job_kill leaves no process once the Job settles.

``TreeProvider`` is a minimal out-of-process provider written the way product providers
are: it spawns a real child through ``dsh_subprocess.spawn`` (the child starts a
grandchild of its own), publishes a :class:`SubprocessRunHandle` whose teardown is the
subprocess seam's whole-tree termination, and settles through ``settle_run_result``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import psutil
import pytest
from dsh_subagent import (
    NO_START_CAPABILITIES,
    CancelController,
    LocalCancellation,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubagentProvider,
    SubagentResult,
    SubagentService,
    SubprocessRunHandle,
    TextBlock,
    settle_run_result,
)
from dsh_subagent.tool import SubagentTool, SubagentToolConfig
from dsh_subagent.tool_protocol import ToolCallContext
from dsh_subprocess import ManagedProcess, SpawnSpec, spawn
from dsh_tool_jobs import BackgroundSubagentLauncher, JobRegistry, JobSnapshot, job_tools

pytestmark = pytest.mark.anyio

CHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print("ready", grandchild.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class TreeProvider(SubagentProvider):
    def __init__(self, home: Path) -> None:
        self.home = home
        self.pids: set[int] = set()
        self.process: ManagedProcess | None = None
        self.published = anyio.Event()

    @property
    def name(self) -> str:
        return "tree"

    @property
    def capabilities(self) -> SubagentCapabilities:
        return NO_START_CAPABILITIES

    @property
    def inherits_parent_context(self) -> bool:
        return False

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        env: dict[str, str | None] = {"HOME": str(self.home), "TMPDIR": str(self.home)}
        spec = SpawnSpec(
            argv=(sys.executable, "-c", CHILD),
            cwd=str(self.home),
            env=env,
            stdin="devnull",
            stderr="devnull",
            grace=1.0,
        )
        process = self.process = await spawn(spec)
        try:
            assert process.stdout is not None
            line = b""
            with anyio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive()
            self.pids = set(process.tree_pids()) | {process.pid, int(line.split()[1])}
            if request.cancel.aborted:
                raise RuntimeError("cancelled during startup")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await process.terminate()
            raise

        local = LocalCancellation()
        remove = request.cancel.add_listener(local.request_cancel)

        async def attempt() -> SubagentResult:
            await process.wait()
            return SubagentResult(output=(TextBlock(text="exited"),), stop_reason="completed")

        async def teardown() -> None:
            await process.terminate()  # returns only once the whole tree has exited

        handle = SubprocessRunHandle(
            request_cancel=local.request_cancel,
            teardown=teardown,
            remove_cancel_listener=remove,
        )

        async def settle() -> SubagentResult:
            return await settle_run_result(attempt, local=local, remove_cancel_listener=remove)

        request.task_group.start_soon(handle.drive, settle)
        self.published.set()
        return handle


@pytest.mark.parametrize("stop", ["job_kill", "owner_disposal"])
async def test_a_stopped_real_process_tree_is_gone_when_the_job_settles(
    tmp_path: Path, stop: str
) -> None:
    provider = TreeProvider(tmp_path)
    parent = ParentContext(session_id="p", cwd=str(tmp_path))
    at_settlement: list[tuple[JobSnapshot, dict[int, bool]]] = []
    async with SubagentService() as service:
        service.register_provider(provider)
        async with JobRegistry() as registry:

            def on_done(snapshot: JobSnapshot, owner: ParentContext | None) -> None:
                at_settlement.append((snapshot, {pid: alive(pid) for pid in provider.pids}))

            registry.on_done(on_done)
            tool = SubagentTool(
                service,
                SubagentToolConfig(provider="tree", max_depth="provider-managed"),
                BackgroundSubagentLauncher(registry, service),
            )
            output, _, kill = job_tools(registry)
            context = ToolCallContext(parent, CancelController().signal)
            started = await tool.call(
                {"description": "long task", "prompt": "run", "run_in_background": True}, context
            )
            assert started.text == "started background subagent job subagent-1"
            with anyio.fail_after(30):
                await provider.published.wait()
            assert len(provider.pids) >= 2
            assert all(alive(pid) for pid in provider.pids)

            if stop == "job_kill":
                killed = await kill.call({"job_id": "subagent-1"}, context)
                assert killed.text == "requested cancellation of job subagent-1"
                with anyio.fail_after(30):
                    reply = await output.call({"job_id": "subagent-1", "wait": True}, context)
                assert reply.text == "(no new output)\n[status: killed]"
            else:
                with anyio.fail_after(30):
                    await registry.dispose_owner(parent)
                assert registry.list(parent) == []

    snapshot, liveness = at_settlement[0]
    assert snapshot.status == "killed"
    assert liveness == dict.fromkeys(provider.pids, False)
    assert provider.process is not None
    assert not provider.process.tree_alive()
