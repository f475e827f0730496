"""The mkdocs hook maps a package README's GitHub links to the site's pages."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import mkdocs_links

ROOT = Path(__file__).resolve().parents[2]


def test_guides_and_siblings_map_to_site_pages_and_the_rest_is_left() -> None:
    assert mkdocs_links.site_link("../../docs/worktrees.md") == "../worktrees.md"
    assert mkdocs_links.site_link("../dsh-profiles/README.md") == "dsh-profiles.md"
    assert mkdocs_links.site_link("../../examples") is None
    assert mkdocs_links.site_link("../dsh-profiles/pyproject.toml") is None


def test_anchors_survive_and_non_relative_links_are_untouched() -> None:
    text = "[a](../../docs/security.md#the-hosts-environment) [b](https://x.org/y.md) [c](#d)"
    assert mkdocs_links.readme_for_site(text) == (
        "[a](../security.md#the-hosts-environment) [b](https://x.org/y.md) [c](#d)"
    )


def test_every_api_page_snippet_is_expanded_with_site_links() -> None:
    config = {"config_file_path": str(ROOT / "mkdocs.yml")}
    pages = sorted((ROOT / "docs" / "api").glob("*.md"))
    assert pages
    for page in pages:
        source = page.read_text(encoding="utf-8")
        fake = SimpleNamespace(file=SimpleNamespace(src_uri=f"api/{page.name}"))
        expanded = mkdocs_links.on_page_markdown(source, fake, config)
        # A snippet line the hook does not know would stay (section markers are comments).
        assert not re.search(r'^--8<-- "', expanded, re.M), page.name
        assert not re.search(r"\]\(\.\./(\.\./docs/|dsh-[a-z-]+/README\.md)", expanded), page.name
