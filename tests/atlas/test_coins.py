"""Saving many works at once: Explore lists one COinS span per work, which Zotero's
connector reads; each parses to the same facts as the work page's citation tags."""

import html
import re
from urllib.parse import parse_qsl

import pytest

pytestmark = pytest.mark.django_db

SPAN = re.compile(
    r'<h3><a href="/works/([a-z0-9-]+)/">.*?<span class="Z3988" title="([^"]*)">', re.S
)
META = re.compile(r'<meta name="(citation_[a-z_]+)" content="([^"]*)">')


def _coins(page: str) -> dict[str, list[tuple[str, str]]]:
    return {
        slug: parse_qsl(html.unescape(title), strict_parsing=True)
        for slug, title in SPAN.findall(page)
    }


def _facts_from_coins(pairs: list[tuple[str, str]]) -> dict:
    values = lambda key: [v for k, v in pairs if k == key]  # noqa: E731
    ids = values("rft_id")
    return {
        "title": values("rft.atitle"),
        "authors": values("rft.au"),
        "date": [d.replace("-", "/") for d in values("rft.date")],
        "arxiv": [i.removeprefix("info:arxiv/") for i in ids if i.startswith("info:arxiv/")],
        "abstract": [i for i in ids if not i.startswith("info:")],
        "venue": values("rft.jtitle"),
    }


def _facts_from_meta(page: str) -> dict:
    tags = [(name, html.unescape(content)) for name, content in META.findall(page)]
    values = lambda key: [v for k, v in tags if k == key]  # noqa: E731
    return {
        "title": values("citation_title"),
        "authors": values("citation_author"),
        "date": values("citation_publication_date"),
        "arxiv": values("citation_arxiv_id"),
        "abstract": values("citation_abstract_html_url"),
        "venue": values("citation_conference_title") + values("citation_journal_title"),
    }


def test_each_listed_work_carries_coins_with_its_citation_facts(client, small_atlas) -> None:
    # given Explore's list
    spans = _coins(client.get("/").content.decode())
    # then every listed work has one ContextObject, in the version Zotero reads
    assert sorted(spans) == sorted(small_atlas)
    for slug, pairs in spans.items():
        assert ("ctx_ver", "Z39.88-2004") in pairs
        # and it states what the work's own page states to reference managers
        page = client.get(f"/works/{slug}/").content.decode()
        assert _facts_from_coins(pairs) == _facts_from_meta(page), slug
    universal = dict(spans["universal-transformers"])
    assert (universal["rft.genre"], universal["rft.date"]) == ("proceeding", "2019")


def test_coins_follow_the_filters_and_the_export_link_keeps_them(client, small_atlas) -> None:
    page = client.get("/", {"has_code": "true"}).content.decode()
    assert len(_coins(page)) == 3
    assert "/api/v1/export/?has_code=true&amp;format=bibtex" in page
