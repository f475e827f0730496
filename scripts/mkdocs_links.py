"""mkdocs hook: the links of a package README included into an API page reach the site.

A README is written for GitHub, next to its package (``packages/<dist>/README.md``): it
links a guide as ``../../docs/<page>.md`` and a sibling as ``../<dist>/README.md``. Its
API page (``docs/api/<dist>.md``) includes it with a snippet line (``--8<-- "<path>"``);
the snippet is expanded here, before mkdocs checks the links, with those links mapped to
the site's own pages (``../<page>.md``, ``<dist>.md``); any other link is left alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_SNIPPET = re.compile(r'^--8<-- "((?:packages/[\w-]+|contract-tests)/README\.md)"$', re.M)
_LINK = re.compile(r"\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")
_GUIDE = re.compile(r"\.\./\.\./docs/([\w./-]+\.md)")
_SIBLING = re.compile(r"\.\./(dsh-[a-z-]+)/README\.md")


def site_link(target: str) -> str | None:
    """Where a README's relative link points on the site, or ``None`` to leave it."""
    guide = _GUIDE.fullmatch(target)
    if guide:
        return f"../{guide.group(1)}"
    sibling = _SIBLING.fullmatch(target)
    if sibling:
        return f"{sibling.group(1)}.md"
    return None


def readme_for_site(text: str) -> str:
    """A README's text with its guide and sibling links mapped to the site's pages."""

    def replace(match: re.Match[str]) -> str:
        mapped = site_link(match.group(1))
        return match.group(0) if mapped is None else f"]({mapped}{match.group(2) or ''})"

    return _LINK.sub(replace, text)


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    if not str(page.file.src_uri).startswith("api/"):
        return markdown
    root = Path(config["config_file_path"]).parent

    def expand(match: re.Match[str]) -> str:
        return readme_for_site((root / match.group(1)).read_text(encoding="utf-8"))

    return _SNIPPET.sub(expand, markdown)
