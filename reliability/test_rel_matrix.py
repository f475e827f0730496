"""The hostile-product fault matrix: every cell settles once, as documented, leak-free.

Each cell asserts: exactly-once settlement with the documented stop reason, stage and
category; paired lifecycle events; no planted secret in output, diagnostic, foreground
tool text, lifecycle events, start error or Job text; no process of the tree alive after
disposal (psutil, with this process as subreaper); no file descriptor left open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reliability.cells import Cell, all_cells
from reliability.profiles import current_profile
from reliability.runner import run_cell

pytestmark = [pytest.mark.anyio, pytest.mark.reliability]


def _params() -> list[Any]:
    params = []
    for cell in all_cells():
        # ACP runs on asyncio only: the acp library's connection is asyncio-bound.
        # A finding (xfail) runs once: it waits out its deadline every time.
        backends = ["asyncio"] if cell.provider == "acp" or cell.xfail else ["asyncio", "trio"]
        marks = [pytest.mark.xfail(strict=True, reason=cell.xfail)] if cell.xfail else []
        params += [
            pytest.param(cell, backend, id=f"{cell.id}-{backend}", marks=marks)
            for backend in backends
        ]
    return params


@pytest.mark.parametrize(("cell", "anyio_backend"), _params())
async def test_cell(cell: Cell, anyio_backend: str, tmp_path: Path) -> None:
    del anyio_backend  # selects the event loop through the anyio plugin
    report = await run_cell(cell, tmp_path, current_profile())
    assert report.passed, report.explain()
