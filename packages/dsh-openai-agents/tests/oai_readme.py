"""The README's Python blocks, by section (module name unique on sys.path)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def run_block(section: str) -> dict[str, Any]:
    """Execute the first Python block under ``## <section>`` as a module; return its namespace.

    The block runs as a registered module (``dataclasses`` looks its module up).
    """
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert match is not None, f"no python block under {section!r}"
    module = types.ModuleType("oai_readme_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(match.group(1), str(README), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__
