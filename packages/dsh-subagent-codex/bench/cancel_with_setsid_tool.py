"""Cancel → whole tree gone for a real Codex run whose shell tool left a ``setsid`` process.

``uv run python packages/dsh-subagent-codex/bench/cancel_with_setsid_tool.py [N]``

The loopback model makes Codex run ``setsid sh -c '<trap> sleep 300' &`` (an escapee in a
session of its own), then holds the next response so the turn is still running; the host
cancels the run and times until no process of the tree (escapee included) is alive.
Two cases: the escapee honours SIGTERM, or ignores it (then the grace, 3 s, bounds it).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from dsh_contract_tests.fixtures.responses import (
    FunctionCall,
    Hold,
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import (
    CancelController,
    ParentContext,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import ProcessWatch, become_subreaper

CASES = {
    "escapee honours SIGTERM": "sleep 300",
    "escapee ignores SIGTERM": "trap '' TERM; exec sleep 300",
}


async def once(root: Path, body: str) -> float:
    marker = root / "escaped"
    command = f'setsid sh -c "echo $$ > {marker}; {body}" > /dev/null 2>&1 &'
    script: list[FunctionCall | Hold] = [
        FunctionCall((("exec_command", {"cmd": command}),)),
        Hold(then=PlainAnswer("too late")),
    ]
    with ResponsesFixture(script) as fixture:
        env = codex_keyless_env(root / "keyless")
        write_codex_config(env["CODEX_HOME"], fixture.base_url)
        provider = CodexProvider(
            CodexConfig(
                env=env,
                dispose_grace=3.0,
                permission_mode="dangerously-bypass-approvals-and-sandbox",
            )
        )
        workspace = root / "workspace"
        workspace.mkdir()
        cancel = CancelController()
        with ProcessWatch() as watch:
            async with SubagentService() as service:
                service.register_provider(provider)
                run = await service.start(
                    "codex",
                    SubagentStartRequest(
                        prompt=(TextBlock(text="start the helper"),),
                        parent=ParentContext(session_id="bench", cwd=str(workspace)),
                        cancel=cancel.signal,
                    ),
                )
                await anyio.to_thread.run_sync(fixture.wait_for_hold, 60.0)
                while not marker.exists():  # noqa: ASYNC110 - a file another process writes
                    await anyio.sleep(0.005)
                started = time.perf_counter()
                cancel.cancel("bench")
                await run.result()
                await run.dispose()
                elapsed = time.perf_counter() - started
            fixture.release()
            assert watch.alive() == [], watch.alive()
    return elapsed


async def main(n: int) -> None:
    become_subreaper()
    for name, body in CASES.items():
        samples = []
        for _ in range(n):
            with tempfile.TemporaryDirectory() as root:
                samples.append(await once(Path(root), body))
        print(
            f"{name}: median {statistics.median(samples) * 1000:.0f} ms "
            f"(min {min(samples) * 1000:.0f}, max {max(samples) * 1000:.0f}, n={n})"
        )


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 5)
