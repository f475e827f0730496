"""A host that delegates through the real providers to hanging fakes, then waits to die.

``python host_program.py ROOT``: starts one Codex, one Claude Code and one ACP delegation
(each product with a setsid grandchild holding its stdout), waits until every product
hangs mid-turn, prints the JSON list of its descendant pids on one line, then idles until
it is killed. The reliability tier kills it with SIGTERM or SIGKILL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import psutil
from dsh_subagent import (
    ParentContext,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)

from reliability.fakes import FakeSetup
from reliability.planted import Planted


def _hanging(root: Path, product: str) -> tuple[FakeSetup, object]:
    setup = FakeSetup(root=root / product, planted=Planted())
    setup.root.mkdir(parents=True)
    setup.prelude = [{"do": "setsid_grandchild", "pidfile": str(setup.pidfile("grandchild"))}]
    ready = str(setup.ready_marker)
    if product == "codex":
        provider: object = setup.codex(
            [
                {"op": "expect", "method": "initialize"},
                {"op": "reply", "result": {"userAgent": "fake"}},
                {"op": "expect", "method": "initialized"},
                {"op": "expect", "method": "thread/start"},
                {"op": "reply", "result": {"thread": {"id": "t", "ephemeral": True}}},
                {"op": "expect", "method": "turn/start"},
                {
                    "op": "reply",
                    "result": {"turn": {"id": "u", "status": "inProgress", "items": []}},
                },
                {"op": "ready", "path": ready},
                {"op": "hang"},
            ]
        )
    elif product == "claude-code":
        provider = setup.claude([{"op": "init"}, {"op": "touch", "path": ready}, {"op": "hang"}])
    else:
        provider = setup.acp({"prompt": [{"hang": True}], "on_eof": "ignore", "trap_term": True})
    return setup, provider


async def main(root: Path) -> None:
    async with SubagentService() as service:
        setups = []
        for product in ("codex", "claude-code", "acp"):
            setup, provider = _hanging(root, product)
            service.register_provider(provider)  # type: ignore[arg-type]
            request = SubagentStartRequest(
                prompt=(TextBlock(text=setup.planted.prompt()),),
                parent=ParentContext(session_id="host", cwd=str(setup.workspace)),
            )
            await service.start(product, request)
            setups.append(setup)
        with anyio.fail_after(30):
            while not all(  # noqa: ASYNC110 - markers are written by other processes
                s.ready_marker.exists() or s.acp_frames("session/prompt") for s in setups
            ):
                await anyio.sleep(0.02)
        pids = sorted(p.pid for p in psutil.Process().children(recursive=True))
        print(json.dumps(pids), flush=True)
        await anyio.sleep(3600)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
