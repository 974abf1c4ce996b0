"""Every link in the README and the docs/ pages resolves: a file of the repository (and,
for ``page.md#anchor``, a heading of that page), so moving a section never strands one.
Links to other sites are left to the reader's browser (the tests run offline)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    headings = re.findall(r"^#+\s+(.+)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # code is not links
    return LINK.findall(text)


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / link).resolve() for link in _links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= linked
    assert len(PAGES) >= 7


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_resolves(page):
    broken = []
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):
            continue  # another site
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        missing = not target.exists() or not target.is_relative_to(ROOT)
        if missing or (anchor and target.suffix == ".md" and anchor not in _anchors(target)):
            broken.append(link)
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"
