"""A host that starts one real delegation, says so in a file, then waits to be killed.

``python credential_host.py SPEC``: ``SPEC`` is a JSON file ``{"type": "codex" |
"claude-code" | "acp", "config": {...}, "workspace": "...", "ready": "..."}``. The host
builds that provider from ``config``, starts one delegation of a fixed task in
``workspace`` through a :class:`~dsh_subagent.SubagentService`, and once ``start()`` has
returned (the run is published and its turn under way) writes ``ready`` atomically.
Then it idles until the test SIGKILLs it; the product tree must not outlive it and must
leave no credential on disk (``test_credentials_at_rest.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from dsh_subagent import ParentContext, SubagentService, SubagentStartRequest, TextBlock
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider

TASK = "Run the tool, then answer."


def _provider(product: str, config: dict[str, Any]) -> Any:
    if product == "codex":
        return CodexProvider(CodexConfig(**config))
    if product == "claude-code":
        return ClaudeCodeProvider(ClaudeCodeConfig(**config))
    if product == "acp":
        return AcpProvider(AcpConfig(**config))
    raise SystemExit(f"unknown product type {product!r}")


async def main(spec: dict[str, Any]) -> None:
    provider = _provider(spec["type"], spec["config"])
    ready = Path(spec["ready"])
    async with SubagentService() as service:
        service.register_provider(provider)
        await service.start(
            provider.name,
            SubagentStartRequest(
                prompt=(TextBlock(text=TASK),),
                parent=ParentContext(session_id="credential-host", cwd=spec["workspace"]),
            ),
        )
        partial = anyio.Path(ready.with_name(ready.name + ".partial"))
        await partial.write_text(json.dumps({"pid": os.getpid()}), encoding="utf-8")
        await partial.rename(ready)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
