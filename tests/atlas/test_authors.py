"""Authors as entities: one identity per person, their pages, ``author=`` and the API,
on SQLite and PostgreSQL."""

import re

import pytest

from atlas.authors import aliases_load, author_identities, authors_sync, name_key
from atlas.datafile import DEFAULT_PATH, records_from_file
from atlas.models import Author, Work, WorkAuthor
from atlas.records import record_from_row
from atlas.services import atlas_load
from tests.atlas.conftest import load_rows, make_row

WORK_LINK = re.compile(r'<h3><a href="/works/([a-z0-9-]+)/">')


def _atlas_names() -> list[str]:
    return [name for r in records_from_file(DEFAULT_PATH) for name in r.values["authors"]]


def test_the_atlas_own_spellings_of_one_person_become_one_author() -> None:
    # given every author name the curated atlas writes, and the curated aliases
    identities = author_identities(_atlas_names(), aliases_load())
    # then case, accents, hyphens and initials are joined, the alias file joins the rest
    same = [
        ("Shiwei Liu", "Shiwei liu", "shiwei-liu", "Shiwei Liu"),
        ("Arnau Padrés Masdemont", "Arnau Padres Masdemont", "arnau-padres-masdemont", None),
        ("Jordi Ros-Giralt", "Jordi Ros Giralt", "jordi-ros-giralt", "Jordi Ros-Giralt"),
        ("Jason Eshraghian", "Jason K. Eshraghian", "jason-eshraghian", "Jason Eshraghian"),
        ("J. Zico Kolter", "Zico Kolter", "j-zico-kolter", "J. Zico Kolter"),
    ]
    for one, other, slug, shown in same:
        assert identities[one] == identities[other]
        assert identities[one].slug == slug
        assert identities[one].name == (shown or one)  # the most used, accents kept
    # and spacing inside a name keeps two people apart
    assert identities["Yong Jae Lee"] != identities["Yongjae Lee"]
    assert len({i.key for i in identities.values()}) == len(set(_atlas_names())) - 5


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("J. Zico Kolter", "J Zico  Kolter"),
        ("İsmail Ceylan", "Ismail Ceylan"),
        ("Łukasz", "lukasz"),
    ],
)
def test_names_fold_periods_spacing_and_accents(one: str, other: str) -> None:
    assert name_key(one) == name_key(other)


def _load(rows: list[dict]) -> None:
    atlas_load(records=[record_from_row(row) for row in rows], source="test")


@pytest.mark.django_db
def test_an_author_page_lists_exactly_their_works_newest_first(client) -> None:
    # given three works, two by one person spelled two ways
    _load(
        [
            make_row(1, authors=["Ana Pérez", "Bo Li"], month="2024-01"),
            make_row(2, authors=["ana perez"], month="2025-03"),
            make_row(3, authors=["Bo Li"], authors_et_al=True),
        ]
    )
    # when
    page = client.get("/authors/ana-perez/").content.decode()
    # then both and only their works are listed, newest first, with their facet counts
    assert WORK_LINK.findall(page) == ["work-2", "work-1"]
    assert '<h1 id="author-name">Ana Pérez</h1>' in page
    assert re.search(
        r"recurrence_family=looped-lm\"[^>]*>Looped language model</a> <span class=\"n\">2<", page
    )
    # and the work whose author list is truncated may hold more of their works
    assert "May have more works here" in page and "/works/work-3/" in page
    assert client.get("/authors/no-one/").status_code == 404


@pytest.mark.django_db
def test_a_work_page_links_each_author(client) -> None:
    _load([make_row(1, authors=["Ana Pérez", "Bo Li"])])
    page = client.get("/works/work-1/").content.decode()
    assert '<a href="/authors/ana-perez/" rel="author">Ana Pérez</a>' in page
    assert '<a href="/authors/bo-li/" rel="author">Bo Li</a>' in page


@pytest.mark.django_db
def test_author_filters_explore_and_the_api_alike(client) -> None:
    # given
    _load(
        [
            make_row(1, authors=["Ana Pérez"]),
            make_row(2, authors=["Bo Li", "Ana Perez"]),
            make_row(3, authors=["Bo Li"]),
            make_row(4, authors=["Cy Young"]),
        ]
    )
    for query, expected in [
        ("author=ana-perez", {"work-1", "work-2"}),
        ("author=ana-perez&author=bo-li", {"work-1", "work-2", "work-3"}),  # any of
        ("author=bo-li&recurrence_family=looped-lm", {"work-2", "work-3"}),
    ]:
        # when
        explore = set(WORK_LINK.findall(client.get(f"/?{query}").content.decode()))
        api = {work["slug"] for work in client.get(f"/api/v1/works/?{query}").json()["results"]}
        exported = client.get(f"/api/v1/export/?{query}&format=json").json()["works"]
        # then
        assert explore == api == {work["slug"] for work in exported} == expected
    refused = client.get("/api/v1/works/?author=no-one")
    assert refused.status_code == 400 and "no author with slug 'no-one'" in refused.json()["detail"]
    assert client.get("/?author=no-one").status_code == 400


@pytest.mark.django_db
def test_the_authors_api_counts_works_and_searches_names(client) -> None:
    _load([make_row(1, authors=["Ana Pérez", "Bo Li"]), make_row(2, authors=["ana perez"])])
    listed = client.get("/api/v1/authors/").json()["results"]
    assert [(a["slug"], a["name"], a["works_count"]) for a in listed] == [
        ("ana-perez", "Ana Pérez", 2),
        ("bo-li", "Bo Li", 1),
    ]
    assert listed[0]["page_url"] == "http://testserver/authors/ana-perez/"
    found = client.get("/api/v1/authors/", {"search": "PEREZ"}).json()["results"]
    assert [a["slug"] for a in found] == ["ana-perez"]
    assert client.get("/api/v1/authors/", {"search": "pérez a"}).json()["count"] == 1
    assert client.get("/api/v1/authors/bo-li/").json()["works_count"] == 1
    assert client.get("/api/v1/authors/no-one/").status_code == 404
    assert client.get("/api/v1/authors/", {"sort": "x"}).status_code == 400


@pytest.mark.django_db
def test_authors_follow_each_change_and_the_alias_file(tmp_path) -> None:
    # given a work by two people
    _load([make_row(1, authors=["Ana Pérez", "Bo Li"])])
    # when its author list is corrected on a later load
    _load([make_row(1, authors=["Bo Li", "Cy Young"])])
    # then the author without works is gone and the links follow the list's order
    assert sorted(Author.objects.values_list("slug", flat=True)) == ["bo-li", "cy-young"]
    links = WorkAuthor.objects.order_by("position").values_list("author__slug", flat=True)
    assert list(links) == ["bo-li", "cy-young"]
    # when a curator joins two names in the alias file
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text('aliases:\n  "Bo Li": ["Cy Young"]\n', encoding="utf-8")
    authors_sync(aliases_path=aliases)
    # then they are one author, shown by the curated name, with both places in the list
    assert list(Author.objects.values_list("slug", "name")) == [("bo-li", "Bo Li")]
    assert list(links.all()) == ["bo-li", "bo-li"]


@pytest.mark.django_db
def test_an_author_page_is_paged_newest_first(client) -> None:
    # given 30 works by one author
    load_rows(30, authors=["Ana Pérez"])
    # when
    first = WORK_LINK.findall(client.get("/authors/ana-perez/").content.decode())
    second = WORK_LINK.findall(client.get("/authors/ana-perez/?page=2").content.decode())
    # then 25 and 5, together every work once, newest first
    assert (len(first), len(second)) == (25, 5)
    slugs = first + second
    months = dict(Work.objects.values_list("slug", "month"))
    assert len(set(slugs)) == 30 and [months[s] for s in slugs] == sorted(months.values())[::-1]
