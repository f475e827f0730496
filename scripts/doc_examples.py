"""What the tests that run a docs page's Python example verbatim share.

The block is taken from the page, the profile it names is written for the real Codex
against a loopback model, and the script's processes carry a marker in their environment
so the caller sees (and ends) what the script left behind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
from dsh_contract_tests.fixtures import responses

__all__ = ["marked", "python_block", "write_codex_profile"]


def python_block(page: Path, heading: str) -> str:
    """The one Python block of ``page``'s section that starts with ``heading``."""
    text = page.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return str(block)


def write_codex_profile(path: Path, root: Path, base_url: str) -> None:
    """A profile with a ``subagent_codex`` tool: the real Codex keyless at ``base_url``,
    its home under ``root/codex``."""
    codex_env = responses.codex_keyless_env(root / "codex")
    responses.write_codex_config(codex_env["CODEX_HOME"], base_url)
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in codex_env.items())
    path.write_text(
        '[[providers]]\ntype = "codex"\n\n[providers.config.env]\n'
        f"{table}\n\n"
        '[[tools]]\nname = "subagent_codex"\nprovider = "codex"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )


def marked(name: str, marker: str) -> list[psutil.Process]:
    """The live (not zombie) processes whose environment holds ``name=marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(name) == marker and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found
