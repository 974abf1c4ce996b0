"""What Zotero's connector and Google Scholar read from a work page, read back from the
DOM of a real Chromium: the Highwire ``citation_*`` tags and the ScholarlyArticle."""

import io
import json
from typing import Any

import pytest
from django.core.management import call_command

from atlas.models import Work

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

READ_PAGE = """() => ({
  meta: [...document.querySelectorAll('meta[name^="citation_"]')].map(m => [m.name, m.content]),
  ld: [...document.querySelectorAll('script[type="application/ld+json"]')].map(s => s.textContent),
  basis: Object.fromEntries([...document.querySelectorAll('details.basis')].map(
    d => [d.dataset.facet, d.querySelector('.basis-source').textContent])),
})"""


def _read(browser, url: str) -> dict[str, Any]:
    page = browser.new_page()
    try:
        page.goto(url)
        return page.evaluate(READ_PAGE)
    finally:
        page.close()


@pytest.fixture
def curated(db) -> dict[str, Work]:
    call_command("load_atlas", stdout=io.StringIO())
    return {work.slug: work for work in Work.objects.all()}


def test_a_conference_paper_on_arxiv_carries_every_field(browser, live_server, curated) -> None:
    # given the Universal Transformers (ICLR 2019, arXiv 1807.03819)
    work = curated["universal-transformers"]
    # when its page is read by a browser
    page = _read(browser, f"{live_server.url}/works/{work.slug}/")
    # then every Highwire field is there, one author tag per author, in order
    assert page["meta"] == [
        ["citation_title", "Universal Transformers"],
        *[["citation_author", name] for name in work.authors],
        ["citation_publication_date", "2019"],  # the venue's year, as BibTeX gives it
        ["citation_conference_title", "ICLR 2019"],
        ["citation_arxiv_id", "1807.03819"],
        ["citation_pdf_url", "https://arxiv.org/pdf/1807.03819"],
        ["citation_abstract_html_url", "https://arxiv.org/abs/1807.03819"],
    ]
    assert len(work.authors) >= 2
    # and one ScholarlyArticle with the same facts
    [text] = page["ld"]
    article = json.loads(text)
    assert article == {
        "@context": "https://schema.org",
        "@type": "ScholarlyArticle",
        "headline": work.title,
        "name": work.title,
        "author": [{"@type": "Person", "name": name} for name in work.authors],
        "datePublished": "2019",
        "abstract": work.summary,
        "url": f"{live_server.url}/works/{work.slug}/",
        "keywords": ["universal", *work.topics],
        "sameAs": [
            "https://arxiv.org/abs/1807.03819",
            "https://github.com/tensorflow/tensor2tensor",
        ],
        "identifier": {"@type": "PropertyValue", "propertyID": "arXiv", "value": "1807.03819"},
        "publisher": {"@type": "Organization", "name": "ICLR 2019"},
    }
    # and each label says why: halting per position, from seed 000 and the summary
    assert page["basis"]["depth_control"] == "Source: seed 000_bad39026f2b3d836."
    assert page["basis"]["depth_granularity"] == "Source: the summary above."


def test_an_undated_work_cites_only_the_year_it_cannot_precede(
    browser, live_server, curated
) -> None:
    # given LoopFold, whose month no source gives (the seed's order bounds it)
    work = curated["loopfold-parallelizing-recurrent-depth-in-looped"]
    assert work.month_estimated and not work.authors and not work.arxiv_id
    # when
    page = _read(browser, f"{live_server.url}/works/{work.slug}/")
    # then the date is the year alone, and nothing unknown is invented
    assert page["meta"] == [
        ["citation_title", work.title],
        ["citation_publication_date", f"{work.month.year}"],
    ]
    article = json.loads(page["ld"][0])
    assert article["datePublished"] == f"{work.month.year}" and article["author"] == []
    assert "identifier" not in article and "sameAs" not in article
