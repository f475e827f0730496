"""The hostile-product fault matrix: one cell per (provider, behaviour, stage).

Every cell names the outcome its provider documents for that fault (the stage and
category tables of each provider's README). A few cells accept two outcomes where the
provider's own contract makes the split a race (e.g. a Claude Code CLI that dies before
its ``initialize`` reply may be seen during ``query-start`` or after publication).

What a cell is lives in :mod:`reliability.cell`, the parts every provider shares in
:mod:`reliability.cell_parts`, and each provider's cells in ``cells_<provider>.py``.
"""

from __future__ import annotations

from reliability.cell import ANSWER, Cell, Outcome
from reliability.cells_acp import acp_cells
from reliability.cells_claude_code import claude_code_cells
from reliability.cells_codex import codex_cells

__all__ = ["ANSWER", "Cell", "Outcome", "all_cells"]


def all_cells() -> list[Cell]:
    """Every cell of the matrix, in a stable order."""
    return [*codex_cells(), *claude_code_cells(), *acp_cells()]
