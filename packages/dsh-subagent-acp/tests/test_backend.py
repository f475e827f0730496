"""The acp library is asyncio-only: under trio ``start()`` fails loudly and starts nothing.

This module keeps the workspace's asyncio+trio parametrisation on purpose.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from acp_harness import Scripted, delegate, make_request
from dsh_subagent import ProductStartError

pytestmark = pytest.mark.anyio


async def test_backend_support(tmp_path: Path, anyio_backend: str) -> None:
    agent = Scripted(tmp_path, {"prompt": [{"chunk": "ok"}]})
    if anyio_backend == "asyncio":
        assert (await delegate(agent.provider(), cwd=str(agent.workspace))).text == "ok"
        return
    async with anyio.create_task_group() as tg:
        with pytest.raises(ProductStartError) as caught:
            await agent.provider().start(make_request(tg, cwd=str(agent.workspace)))
    assert caught.value.message == (
        "subagent-acp: Product subagent failure "
        "(product: ACP; stage: initialize; category: unsupported-backend)"
    )
    assert agent.records() == []
