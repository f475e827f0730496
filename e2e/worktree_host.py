"""A host that starts one isolated real delegation, says so in a file, then waits to be killed.

``python worktree_host.py SPEC``: ``SPEC`` is a JSON file ``{"config": {...}, "repo":
"...", "ready": "..."}``. The host runs one Codex delegation of a fixed task in ``repo``
isolated by dsh-worktree and, once ``start()`` has returned, writes ``ready`` atomically.
Then it idles until the test SIGKILLs it (``test_worktree_tier.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from dsh_subagent import ParentContext, SubagentService, SubagentStartRequest, TextBlock
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_worktree import Worktree


async def main(spec: dict[str, Any]) -> None:
    provider = Worktree().isolate(CodexProvider(CodexConfig(**spec["config"])))
    ready = Path(spec["ready"])
    async with SubagentService() as service:
        service.register_provider(provider)
        await service.start(
            provider.name,
            SubagentStartRequest(
                prompt=(TextBlock(text=spec["task"]),),
                parent=ParentContext(session_id="worktree-host", cwd=spec["repo"]),
            ),
        )
        partial = anyio.Path(ready.with_name(ready.name + ".partial"))
        await partial.write_text(json.dumps({"pid": os.getpid()}), encoding="utf-8")
        await partial.rename(ready)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
