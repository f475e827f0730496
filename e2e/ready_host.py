"""A host that keeps real products ready, says which, then waits to be killed.

``python ready_host.py SPEC``: ``SPEC`` is a JSON file ``{"product": "codex" |
"claude-code" | "codex-acp", "config": {...}, "cwd": "...", "ready": "..."}``. The host
keeps the instance's ``warm`` products ready for ``cwd`` and, once they all are, writes
``ready`` atomically with their trees' pids. Then it idles until the test SIGKILLs it
(``test_ready_tier.py``: the host-death guard must end every idle ready product).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from dsh_subagent import SubagentService
from dsh_subagent.product import ProductProvider
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider


def provider_of(product: str, config: dict[str, Any]) -> ProductProvider[Any]:
    """The instance a tier test describes as JSON."""
    if product == "codex":
        return CodexProvider(CodexConfig(**config))
    if product == "claude-code":
        return ClaudeCodeProvider(ClaudeCodeConfig(**config))
    return AcpProvider(AcpConfig(**config))


async def main(spec: dict[str, Any]) -> None:
    provider = provider_of(spec["product"], spec["config"])
    ready = Path(spec["ready"])
    async with SubagentService() as service:
        service.register_provider(provider)
        assert service.keep_ready(provider.name, spec["cwd"])
        pool = service.ready_pool(provider.name)
        assert pool is not None
        assert await pool.wait_ready(), "the products never got ready"
        pids = sorted(pid for child in pool.idle for pid in child.process.tree_pids())
        partial = anyio.Path(ready.with_name(ready.name + ".partial"))
        await partial.write_text(json.dumps({"host": os.getpid(), "pids": pids}), "utf-8")
        await partial.rename(ready)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
