"""What reference managers read from a work page: Highwire ``citation_*`` meta tags
(Google Scholar, Zotero's connector) and a schema.org ``ScholarlyArticle`` in JSON-LD;
and from a list of works, one COinS span per work (an OpenURL ContextObject that Zotero's
connector offers to save, all of a page's at once).

Both are built from the serialized work (``WorkSerializer`` row), like the exports, so
the page and the files can never cite a work differently.
"""

import json
from typing import Any
from urllib.parse import urlencode

from atlas.exports import Row, cited_date, venue_kind

_JSON_IN_HTML = str.maketrans({"<": "\\u003C", ">": "\\u003E", "&": "\\u0026"})
_VENUE_TAGS = {"conference": "citation_conference_title", "journal": "citation_journal_title"}


def _date(row: Row, separator: str) -> str:
    """``YYYY<sep>MM``, or only the year where the exports give no month (``cited_date``)."""
    year, month = cited_date(row)
    return f"{year}{separator}{month}" if month else year


def paper_url(row: Row) -> str | None:
    if row["url"]:
        return row["url"]
    return f"https://arxiv.org/abs/{row['arxiv_id']}" if row["arxiv_id"] else None


def citation_meta(row: Row) -> list[tuple[str, str]]:
    """(name, content) of each Highwire tag, one ``citation_author`` per author, in order."""
    tags = [("citation_title", row["title"])]
    tags += [("citation_author", name) for name in row["authors"]]
    tags.append(("citation_publication_date", _date(row, "/")))
    kind = venue_kind(row["venue"])
    if kind in _VENUE_TAGS:
        tags.append((_VENUE_TAGS[kind], row["venue"]))
    if row["arxiv_id"]:
        tags.append(("citation_arxiv_id", row["arxiv_id"]))
        tags.append(("citation_pdf_url", f"https://arxiv.org/pdf/{row['arxiv_id']}"))
    abstract = paper_url(row)
    if abstract:
        tags.append(("citation_abstract_html_url", abstract))
    return tags


def scholarly_article(row: Row) -> dict[str, Any]:
    """The schema.org ``ScholarlyArticle`` of a work."""
    article: dict[str, Any] = {
        "@context": "https://schema.org",
        "@type": "ScholarlyArticle",
        "headline": row["title"],
        "name": row["title"],
        "author": [{"@type": "Person", "name": name} for name in row["authors"]],
        "datePublished": _date(row, "-"),
        "abstract": row["summary"],
        "url": row["page_url"],
        "keywords": [row["recurrence_family"], *row["topics"]],
    }
    same_as = [url for url in (paper_url(row), row["code_url"]) if url]
    if same_as:
        article["sameAs"] = same_as
    if row["arxiv_id"]:
        article["identifier"] = {
            "@type": "PropertyValue",
            "propertyID": "arXiv",
            "value": row["arxiv_id"],
        }
    if row["venue"]:
        article["publisher"] = {"@type": "Organization", "name": row["venue"]}
    return article


def json_ld_text(document: dict[str, Any]) -> str:
    """JSON safe inside a ``<script type="application/ld+json">`` element."""
    return json.dumps(document, ensure_ascii=False).translate(_JSON_IN_HTML)


_COINS_GENRES = {"conference": "proceeding", "journal": "article", "preprint": "preprint"}


def coins(row: Row) -> str:
    """The ``title`` of a ``span.Z3988``: a KEV ContextObject (Z39.88-2004) with the same
    title, authors, date and identifiers as the citation tags."""
    kind = venue_kind(row["venue"])
    pairs = [
        ("ctx_ver", "Z39.88-2004"),
        ("rft_val_fmt", "info:ofi/fmt:kev:mtx:journal"),
        ("rft.genre", _COINS_GENRES.get(kind, "unknown")),
        ("rft.atitle", row["title"]),
    ]
    pairs += [("rft.au", name) for name in row["authors"]]
    pairs.append(("rft.date", _date(row, "-")))
    if kind in _VENUE_TAGS:
        pairs.append(("rft.jtitle", row["venue"]))
    if row["arxiv_id"]:
        pairs.append(("rft_id", f"info:arxiv/{row['arxiv_id']}"))
    abstract = paper_url(row)
    if abstract:
        pairs.append(("rft_id", abstract))
    return urlencode(pairs)
