"""The map of mentions: one node per work in the filter, a line per mention among them,
nodes sized by how often they are mentioned; drawn in a real Chromium."""

import io
import json
import re

import plotly.graph_objects as go
import pytest
from django.core.management import call_command

from atlas.models import RelatedWork, Work

UT = "universal-transformers"
UT_NEED_MEMORY = "universal-transformers-need-memory-depth-state-trade-offs-in"


def _figure(page: str) -> dict:
    match = re.search(r'<script id="map-figure" type="application/json">(.*?)</script>', page, re.S)
    assert match, "no map figure"
    return json.loads(match[1])


@pytest.fixture
def curated(db, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        call_command("load_atlas", stdout=io.StringIO())


@pytest.mark.django_db
def test_the_map_draws_the_filtered_works_and_the_mentions_among_them(client, curated) -> None:
    # when the map is asked for the universal family
    response = client.get("/map/", {"recurrence_family": "universal"})
    figure = _figure(response.content.decode())
    go.Figure(figure)  # plotly's own schema validation
    # then there is one node per work of the family, linked to its page
    edges, *nodes = figure["data"]
    links = [link for trace in nodes for link in trace["customdata"]]
    universal = Work.objects.filter(recurrence_family="universal")
    assert sorted(links) == sorted(work.get_absolute_url() for work in universal)
    # and a line per mention between two of them ("UT need memory" names UT, say)
    mentions = RelatedWork.objects.filter(
        kind=RelatedWork.Kind.MENTIONS, work__in=universal, other__in=universal
    )
    pairs = set(mentions.values_list("work__slug", "other__slug"))
    assert (UT_NEED_MEMORY, UT) in pairs
    assert len(edges["x"]) == 3 * len(pairs)  # a segment each: (from, to, gap)
    # and the most mentioned work is drawn largest
    sizes = {
        link: size
        for trace in nodes
        for link, size in zip(trace["customdata"], trace["marker"]["size"], strict=True)
    }
    assert max(sizes, key=lambda link: sizes[link]) == f"/works/{UT}/"
    assert client.get("/map/", {"recurrence_family": "nope"}).status_code == 400


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_map_renders_in_chromium_with_working_links(browser, live_server) -> None:
    call_command("load_atlas", stdout=io.StringIO())  # its commit runs the related works
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # given the map of the works with code
        page.goto(f"{live_server.url}/map/?has_code=true")
        page.wait_for_selector("#atlas-map[data-drawn]")
        # then Plotly drew one point per work with code
        drawn = page.locator("#atlas-map .scatterlayer .point").count()
        expected = Work.objects.exclude(code_url="").count()
        assert drawn == expected > 0
        # and every node's link answers
        links = page.evaluate(
            "document.getElementById('atlas-map').data.slice(1).flatMap(t => t.customdata)"
        )
        assert len(links) == expected
        assert all(page.request.get(f"{live_server.url}{link}").status == 200 for link in links)
        assert errors == []
    finally:
        page.close()
