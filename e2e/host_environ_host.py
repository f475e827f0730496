"""A library host that runs one real delegation, optionally protected, logging to stderr.

``python host_environ_host.py SPEC``: ``SPEC`` is a JSON file ``{"type": "codex" |
"claude-code" | "acp", "config": {...}, "workspace": "...", "task": "...", "protect":
true | false}``. With ``protect`` the host calls
:func:`dsh_subprocess.protect_host_process` first, as the docs tell a host to. Logging
goes to stderr at WARNING (so dsh's one-time exposure warning shows there); the
delegation's stop reason and answer go to stdout as JSON (``test_host_environ_tier.py``).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import dsh_subprocess
from dsh_subagent import ParentContext, SubagentService, SubagentStartRequest, TextBlock
from dsh_subagent_acp import AcpConfig, AcpProvider
from dsh_subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh_subagent_codex import CodexConfig, CodexProvider


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
    async with SubagentService() as service:
        service.register_provider(provider)
        run = await service.start(
            provider.name,
            SubagentStartRequest(
                prompt=(TextBlock(text=spec["task"]),),
                parent=ParentContext(session_id="host-environ", cwd=spec["workspace"]),
            ),
        )
        result = await run.result()
        await run.dispose()
    print(json.dumps({"stop_reason": result.stop_reason, "text": result.text}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    loaded = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if loaded["protect"]:
        dsh_subprocess.protect_host_process()
    anyio.run(main, loaded)
