"""Shipped sources and docs cite rules by their id or a ``docs/`` page, nothing else.

The design notes, the seeds and the issue tracker the project was built from are not
distributed: a reader of an installed package (or of the published docs) cannot follow
"reference-core §2.7", "products.md §3.6", "seed 004" or "issue 25". A rule is named by
the kit's requirement id (``diagnostic:bounded``) or a page under ``docs/``. This test
reads every shipped file and fails on such a citation, naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What ships: each distribution's sources and README, the kit, the example provider that
# the docs point authors at, and the documentation site.
_SHIPPED_GLOBS = (
    "packages/*/src/**/*.py",
    "packages/*/README.md",
    "contract-tests/src/**/*.py",
    "contract-tests/README.md",
    "e2e/example-provider/src/**/*.py",
    "e2e/example-provider/README.md",
    "docs/**/*.md",
    "README.md",
    "VERSIONING.md",
    "CHANGELOG.md",
)

_CITATIONS = {
    "a section of a document (§)": re.compile(r"§\s*\d"),
    "a design note": re.compile(
        r"\breference-(?:core|providers)\b|\b(?:products|provider-runtime|host-death|style)\.md\b"
    ),
    "a seed": re.compile(r"\bseeds? \d{3}\b"),
    "an issue number": re.compile(r"\bissues? #?\d+\b", re.IGNORECASE),
}


def _shipped() -> Iterator[Path]:
    seen: set[Path] = set()
    for pattern in _SHIPPED_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if path not in seen and path.is_file():
                seen.add(path)
                yield path


# Inside a Markdown code block "issue 101" is example data (a batch task), not a citation.
_EXAMPLE_DATA_OK = frozenset({"an issue number"})


def citations(text: str, *, markdown: bool = False) -> list[tuple[int, str]]:
    """``(line number, what is cited)`` for every citation a reader cannot follow."""
    found = []
    in_code = False
    for number, line in enumerate(text.splitlines(), start=1):
        if markdown and line.lstrip().startswith("```"):
            in_code = not in_code
        for what, pattern in _CITATIONS.items():
            if in_code and what in _EXAMPLE_DATA_OK:
                continue
            if pattern.search(line):
                found.append((number, what))
    return found


@pytest.mark.parametrize(
    "line",
    [
        "Settlement (reference-core §2.7) always awaits the result",
        '"""Model-visible description (reference-core §4.6)."""',
        "Two options exist (`products.md` §3.6): a `cli_path`",
        "Policy (seed 004): runtime dependencies must be permissive",
        "Fixed in issue 25.",
    ],
)
def test_a_citation_a_reader_cannot_follow_is_found(line: str) -> None:
    assert citations(line) != []


@pytest.mark.parametrize(
    "line",
    [
        "Settlement (``settlement:result-never-raises``) always awaits the result",
        "See docs/rules.md#diagnostic-bounded and [Troubleshooting](troubleshooting.md).",
        "the host-death guard kills the tree",
        "a random seed for hypothesis",
    ],
)
def test_a_rule_id_or_docs_page_is_fine(line: str) -> None:
    assert citations(line) == []


def test_an_issue_number_in_a_markdown_example_is_data_but_a_section_is_not() -> None:
    text = "```jsonl\n" + '{"task": "Read issue 101"}\n' + "see reference-core §2\n```\n"
    assert citations(text, markdown=True) == [
        (3, "a section of a document (§)"),
        (3, "a design note"),
    ]
    assert (2, "an issue number") in citations(text)


def test_no_shipped_file_cites_a_note_a_reader_cannot_follow() -> None:
    files = list(_shipped())
    assert len(files) > 50  # the globs still find the sources
    problems = [
        f"{path.relative_to(ROOT)}:{number}: cites {what}"
        for path in files
        for number, what in citations(
            path.read_text(encoding="utf-8"), markdown=path.suffix == ".md"
        )
    ]
    assert problems == [], "\n".join(problems)
