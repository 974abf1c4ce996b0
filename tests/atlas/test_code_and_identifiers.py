"""Finding works by code, by arXiv identifier, by venue and by code host, on Explore and
in the API alike, on SQLite and PostgreSQL."""

import re

import pytest

pytestmark = pytest.mark.django_db

WORK_LINK = re.compile(r'<h3><a href="/works/([a-z0-9-]+)/">')
WITH_CODE = [
    "looped-diffusion-transformer",
    "deja-view-looping-transformers-3d",
    "mixture-of-recursions",
]


def _found(client, query: dict) -> tuple[set[str], set[str]]:
    explore = set(WORK_LINK.findall(client.get("/", query).content.decode()))
    api = {work["slug"] for work in client.get("/api/v1/works/", query).json()["results"]}
    return explore, api


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", set(WITH_CODE)),
        (
            "false",
            {
                "loopfold-parallelizing-recurrent-depth",
                "resid-quant-kv-cache",
                "t2mlr-temporal-middle-layer-recurrence",
                "loop-think-generalize",
                "universal-transformers",
            },
        ),
    ],
)
def test_has_code_keeps_the_works_with_or_without_a_code_link(
    client, small_atlas, value, expected
) -> None:
    explore, api = _found(client, {"has_code": value})
    assert explore == api == expected


def test_has_code_is_counted_in_the_facet_panels(client, small_atlas) -> None:
    # when the list is narrowed to works with code
    facets = client.get("/api/v1/facets/", {"has_code": "true"}).json()["facets"]
    code = next(facet for facet in facets if facet["name"] == "has_code")
    counts = {value["slug"]: (value["count"], value["selected"]) for value in code["values"]}
    # then each value counts what choosing it would give, ignoring its own filter
    assert counts == {"true": (3, True), "false": (5, False)}
    page = client.get("/", {"has_code": "true"}).content.decode()
    assert re.search(
        r'name="has_code" value="true" checked>\s*Code released <span class="n">3<', page
    )


@pytest.mark.parametrize(
    "text",
    [
        "1807.03819",
        "1807.03819v3",
        "arXiv:1807.03819",
        "https://arxiv.org/abs/1807.03819v1",
        "http://arxiv.org/pdf/1807.03819",
        "ICLR 2019",
    ],
)
def test_an_arxiv_identifier_or_the_venue_finds_the_work(client, small_atlas, text) -> None:
    explore, api = _found(client, {"search": text})
    assert explore == api == {"universal-transformers"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("github", set(WITH_CODE)),
        ("github.com", set(WITH_CODE)),
        ("nv-tlabs", {"deja-view-looping-transformers-3d"}),
        ("raymin0223", {"mixture-of-recursions"}),
    ],
)
def test_a_code_host_or_owner_finds_the_works(client, small_atlas, text, expected) -> None:
    explore, api = _found(client, {"search": text})
    assert explore == api == expected


def test_a_work_without_authors_or_links_asks_for_exactly_those(client, small_atlas) -> None:
    # given the newest work, whose sources give no authors and no link yet
    page = client.get("/works/loopfold-parallelizing-recurrent-depth/").content.decode()
    # then the page says so and links to a suggestion of each missing field
    assert "Authors not known yet." in page and 'href="?suggest=authors#suggest"' in page
    assert "Links to the paper not known yet." in page and '?suggest=url#suggest"' in page
    assert '<ul class="links">' not in page
    # and following the link opens the form on that field
    form = client.get("/works/loopfold-parallelizing-recurrent-depth/?suggest=authors")
    assert '<option value="authors" selected>' in form.content.decode()
    # and the BibTeX entry says what is missing instead of inventing it
    bibtex = client.get(
        "/api/v1/export/?format=bibtex&works=loopfold-parallelizing-recurrent-depth"
    )
    assert "; authors not known yet; links not known yet}" in bibtex.content.decode()


def test_a_work_with_authors_and_links_asks_for_neither(client, small_atlas) -> None:
    page = client.get("/works/universal-transformers/").content.decode()
    assert "not known yet" not in page
