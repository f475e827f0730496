"""Every Loader profile shown in a README or a docs page composes as written.

A profile block that no longer matches the profile schema (a renamed key, a tool row
that needs the ``[jobs]`` table) fails here, not in a user's first ``dsh check``.
Composing validates every row and constructs the providers; it starts nothing.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from dsh_profiles.loader import compose
from dsh_profiles.profile import parse_profile
from dsh_subprocess.testing import ProcessWatch

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")])


def _profile_blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        blocks = re.findall(r"```toml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        for index, block in enumerate(blocks):
            if "[[providers]]" in block:
                found.append((f"{page.relative_to(ROOT)}#{index}", block))
    return found


BLOCKS = _profile_blocks()


def test_the_pages_show_profiles_at_all() -> None:
    pages = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"docs/cli.md", "packages/dsh-subagent-codex/README.md"} <= pages


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_the_profile_composes_and_starts_nothing(where: str, block: str) -> None:
    watch = ProcessWatch()
    composition = compose(parse_profile(tomllib.loads(block)))
    assert composition.providers, where
    assert watch.alive() == []
