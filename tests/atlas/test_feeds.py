"""Atom feeds of works (any Explore search) and of data versions: valid Atom, entries
that link to live pages, exactly the works Explore finds, 400 on a bad parameter, and
answers cached by data version."""

import feedparser
import pytest
from django.test import Client

from atlas.models import Work
from atlas.proposals import proposal_accept, proposal_submit
from tests.atlas.api.test_proposals import CONTACT, proposal

pytestmark = pytest.mark.django_db


def feed(client: Client, path: str, **params) -> feedparser.FeedParserDict:
    response = client.get(path, params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/atom+xml")
    parsed = feedparser.parse(response.content)
    assert not parsed.bozo, parsed.bozo_exception
    return parsed


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"depth_control": "exit-gate"},
        {"search": "loop"},
        {"modality": "language", "month_from": "2025"},
        {"recurrence_family": ["looped-lm", "universal"], "ordering": "title"},
    ],
)
def test_a_search_feed_lists_exactly_what_explore_finds(client, small_atlas, params) -> None:
    # when
    parsed = feed(client, "/feeds/works.atom", **params)
    explore = client.get("/", params).context["explore"]
    # then
    expected = {f"http://testserver{w.get_absolute_url()}" for w in explore.page.object_list}
    assert {entry.link for entry in parsed.entries} == expected


def test_every_entry_links_to_a_page_that_answers(client, small_atlas) -> None:
    parsed = feed(client, "/feeds/works.atom")
    assert len(parsed.entries) == len(small_atlas)
    for entry in parsed.entries:
        assert client.get(entry.link).status_code == 200
    for entry in feed(client, "/feeds/changes.atom").entries:
        assert client.get(entry.link).status_code == 200


def test_an_entry_has_authors_month_summary_facets_and_the_paper(client, small_atlas) -> None:
    entry = next(
        e for e in feed(client, "/feeds/works.atom").entries if e.title == "Universal Transformers"
    )
    work = Work.objects.get(slug="universal-transformers")
    assert entry.summary == work.summary and entry.author.startswith("Mostafa Dehghani")
    terms = {tag.term for tag in entry.tags}
    assert {"recurrence_family:universal", "month:Jul 2018"} <= terms
    assert "https://arxiv.org/abs/1807.03819" in {link.href for link in entry.links}


def test_a_new_work_heads_the_feed_and_the_changes_feed_has_its_version(
    client, small_atlas
) -> None:
    # given a proposal accepted after the atlas was loaded
    before = feed(client, "/feeds/works.atom")
    accepted = proposal_accept(proposal=proposal_submit(data=proposal()), reviewer=None)
    work = accepted.work
    assert work is not None
    # when
    after = feed(client, "/feeds/works.atom")
    changes = feed(client, "/feeds/changes.atom")
    # then
    assert after.entries[0].title == work.title and len(after.entries) == len(before.entries) + 1
    assert changes.entries[0].title.endswith(f"{work.slug}: added (proposal #{accepted.pk})")
    assert f"{work.slug}: added" in changes.entries[0].summary
    for parsed in (after, changes):
        assert CONTACT not in str(parsed)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"depth_control": "whenever"}, "depth_control"),
        ({"month_from": "May"}, "month_from"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(client, small_atlas, params, named) -> None:
    response = client.get("/feeds/works.atom", params)
    assert response.status_code == 400 and named in response.content.decode()


def test_feeds_are_cached_by_data_version(client, small_atlas, django_assert_num_queries):
    # given a feed answered once
    first = client.get("/feeds/works.atom", {"search": "loop"})
    # when asked again, reordered, and conditionally
    with django_assert_num_queries(1):  # the data version only
        again = client.get("/feeds/works.atom", {"search": "loop"})
    unchanged = client.get(
        "/feeds/works.atom", {"search": "loop"}, HTTP_IF_NONE_MATCH=first["ETag"]
    )
    # then
    assert again.content == first.content and again["ETag"] == first["ETag"]
    assert unchanged.status_code == 304


def test_every_page_announces_the_feeds_and_explore_its_search(client, small_atlas) -> None:
    home = client.get("/works/universal-transformers/").content.decode()
    search = client.get("/", {"depth_control": "exit-gate", "page": "1"}).content.decode()
    alternate = '<link rel="alternate" type="application/atom+xml"'
    assert f'{alternate} title="Loop Atlas: new works" href="/feeds/works.atom">' in home
    assert 'href="/feeds/changes.atom"' in home
    assert 'href="/feeds/works.atom?depth_control=exit-gate"' in search


def test_a_feed_cached_for_one_host_is_not_served_to_another(client, small_atlas) -> None:
    first = client.get("/feeds/works.atom", HTTP_HOST="localhost")
    other = client.get("/feeds/works.atom", HTTP_HOST="127.0.0.1")
    assert b"http://localhost/works/" in first.content
    assert b"http://127.0.0.1/works/" in other.content and b"localhost" not in other.content
