"""The atlas pages, through the real URL configuration, on SQLite and PostgreSQL."""

import json
import re

import pytest

from atlas.explore import PAGE_SIZE
from atlas.models import Suggestion, Work
from atlas.related import related_refresh
from tests.atlas.conftest import approve_kv, load_rows

pytestmark = pytest.mark.django_db

WORK_LINK = re.compile(r'<h3><a href="/works/([a-z0-9-]+)/">')


def _slugs(response) -> list[str]:
    return WORK_LINK.findall(response.content.decode())


def _figure(response) -> dict:
    match = re.search(
        r'<script id="timeline-figure" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page has no timeline figure"
    return json.loads(match[1])


def test_explore_shows_the_tagline_the_count_and_every_work(client, small_atlas) -> None:
    response = client.get("/")
    page = response.content.decode()
    assert response.status_code == 200
    assert (
        "An open, community-reviewed atlas of looped Transformers, recurrent depth, "
        "adaptive computation and latent reasoning." in page
    )
    assert "8 works by month of first publication, colored by recurrence family." in page
    assert _slugs(response)[0] == "loopfold-parallelizing-recurrent-depth"
    assert len(_slugs(response)) == 8


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("recurrence_family=token-routed", ["mixture-of-recursions"]),
        (
            "depth_control=halting&ordering=oldest",
            ["universal-transformers", "loop-think-generalize"],
        ),
        ("depth_granularity=step", ["looped-diffusion-transformer"]),
        ("kv_strategy=compressed", ["resid-quant-kv-cache"]),
        ("training_regime=retrofit", ["deja-view-looping-transformers-3d"]),
        ("modality=vision&modality=diffusion-generation", ["looped-diffusion-transformer"]),
        ("contribution=compression", ["resid-quant-kv-cache"]),
        ("topics=kv-cache&topics=quantization", ["resid-quant-kv-cache"]),
        ("month_from=2025-05&month_to=2025-10", ["mixture-of-recursions"]),
        ("search=Dehghani", ["universal-transformers"]),
        ("search=denoising", ["looped-diffusion-transformer"]),
        (
            "recurrence_family=universal&ordering=title",
            [
                "deja-view-looping-transformers-3d",
                "looped-diffusion-transformer",
                "universal-transformers",
            ],
        ),
    ],
)
def test_explore_applies_each_filter_search_and_sort(client, small_atlas, query, expected) -> None:
    assert _slugs(client.get(f"/?{query}")) == expected


def test_explore_shows_per_facet_counts_for_the_current_filter(client, small_atlas) -> None:
    page = client.get("/?recurrence_family=universal").content.decode()
    option = re.compile(r'name="depth_control" value="halting"\s*>\s*Halting <span class="n">(\d+)')
    assert (count := option.search(page)) and count[1] == "1"
    family = re.compile(r'value="token-routed"\s*>\s*Token-routed recursion <span class="n">(\d+)')
    assert (count := family.search(page)) and count[1] == "1"  # what choosing it as well would add
    assert 'value="universal" checked' in page


def test_explore_says_so_when_nothing_matches(client, small_atlas) -> None:
    page = client.get("/?search=zeppelin").content.decode()
    assert "No works match these filters. Try fewer topics or clear the search." in page
    assert 'id="timeline-figure"' not in page


def test_an_invalid_filter_is_a_400_that_names_it(client, small_atlas) -> None:
    response = client.get("/?kv_strategy=huge")
    assert response.status_code == 400
    assert "&#x27;huge&#x27; is not an allowed kv_strategy value" in response.content.decode()


def test_an_htmx_request_gets_only_the_explore_region(client, small_atlas) -> None:
    response = client.get("/?modality=vision", headers={"HX-Request": "true"})
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="explore"') and "<html" not in page
    assert len(_slugs(response)) == 2


def test_the_timeline_draws_one_point_per_result_and_marks_estimated_months(client, small_atlas):
    figure = _figure(client.get("/?modality=language"))
    points = [
        (x, symbol, link)
        for trace in figure["data"]
        for x, symbol, link in zip(
            trace["x"], trace["marker"]["symbol"], trace["customdata"], strict=True
        )
    ]
    assert len(points) == 6
    assert ("2026-10-01", "circle-open", "/works/loopfold-parallelizing-recurrent-depth/") in points
    assert ("2018-07-01", "circle", "/works/universal-transformers/") in points
    names = [trace["name"] for trace in figure["data"]]
    assert "Universal / weight-tied stack" in names


def test_filters_stay_in_the_query_string_of_the_pages(client) -> None:
    load_rows(PAGE_SIZE + 5)
    page = client.get("/?modality=language").content.decode()
    assert 'href="?modality=language&amp;page=2"' in page
    second = client.get("/?modality=language&page=2")
    assert len(_slugs(second)) == 5


@pytest.mark.parametrize("works", [3, PAGE_SIZE * 2])
def test_explore_needs_the_same_queries_for_few_and_many_works(
    client, django_assert_num_queries, works
) -> None:
    # given few works, or more than a page (the timeline shows all of them)
    load_rows(works)
    # then: the data version, timeline counts and points, the page, the facet counts
    # (open ones, tags)
    with django_assert_num_queries(6):
        assert client.get("/?modality=language").status_code == 200
    # and another page of the same search reads the version and its page only: the
    # aggregates of a version and search are kept
    with django_assert_num_queries(2):
        assert client.get("/?page=2&modality=language").status_code == 200


def test_explore_counts_the_data_of_now_after_a_reviewed_change(client, small_atlas, curator):
    # given Explore's counts and rows of the loaded version
    before = client.get("/?kv_strategy=no-kv")
    assert "KV: No KV" not in _row(client.get("/"), "universal-transformers")
    # when a reviewed change makes a new version
    approve_kv(curator)
    # then the same search lists one more work, and its facet panel counts it
    after = client.get("/?kv_strategy=no-kv")
    assert len(_slugs(after)) == len(_slugs(before)) + 1
    assert _no_kv_count(after) == _no_kv_count(before) + 1
    # and the work's row shows its new label
    assert "KV: No KV" in _row(client.get("/"), "universal-transformers")


def _row(response, slug: str) -> str:
    rows = response.text.split('<li class="work-row">')[1:]
    (row,) = [row for row in rows if f'href="/works/{slug}/"' in row]
    return row


def _no_kv_count(response) -> int:
    option = re.search(
        r'value="no-kv" checked>\s*No KV <span class="n">(\d+)</span>', response.text
    )
    assert option, "the KV panel shows no count for no-kv"
    return int(option[1])


def test_a_work_page_shows_every_field_bibtex_related_and_compare(client, small_atlas) -> None:
    related_refresh()  # what the load's commit runs
    page = client.get("/works/deja-view-looping-transformers-3d/").content.decode()
    for expected in [
        "Déjà View: Looping Transformers for Multi-View 3D Reconstruction",
        "May 2026",
        '<a href="/authors/alessandro-burzio/" rel="author">Alessandro Burzio</a>, '
        '<a href="/authors/laura-leal-taixe/" rel="author">Laura Leal-Taixé</a> et al.',
        'href="https://arxiv.org/abs/2605.30215"',
        'href="https://github.com/nv-tlabs/dvlt"',
        "Universal / weight-tied stack",
        "Convergence",
        "No KV",
        "Retrofit",
        "3d-reconstruction",
        "@misc{burzio2026deja,",
        "eprint = {2605.30215}",
        'name="picked"',
        "Related works",
        "Not corrected since it was curated",
        "Suggest a correction",
    ]:
        assert expected in page, expected


def test_an_unknown_work_is_a_404(client, small_atlas) -> None:
    assert client.get("/works/no-such-work/").status_code == 404


def _suggest(client, slug="universal-transformers", **fields):
    data = {"field": "kv_strategy", "proposed_value": "per-loop", "rationale": "Section 3."}
    return client.post(f"/works/{slug}/suggest/", data | fields)


def test_a_suggestion_waits_for_review_and_approval_applies_it(
    client, small_atlas, curator_client
) -> None:
    # given a visitor's suggestion
    response = _suggest(client)
    assert response.status_code == 302
    assert "waits for a curator" in client.get(response["Location"]).content.decode()
    suggestion = Suggestion.objects.get()
    assert suggestion.status == "pending"
    assert Work.objects.get(slug="universal-transformers").kv_strategy == "unspecified"
    # when a curator approves it in the admin
    curator_client.post(
        "/admin/atlas/suggestion/",
        {"action": "approve", "_selected_action": [suggestion.pk]},
    )
    # then the work changed and says when it was reviewed
    assert Work.objects.get(slug="universal-transformers").kv_strategy == "per-loop"
    assert str(Suggestion.objects.get().reviewed_by) == "curator"
    assert "Last reviewed on" in client.get("/works/universal-transformers/").content.decode()


def test_a_suggestion_outside_the_vocabulary_is_refused_and_not_queued(client, small_atlas):
    response = _suggest(client, proposed_value="gigantic")
    assert response.status_code == 400
    assert "is not an allowed kv_strategy value" in response.content.decode()
    assert not Suggestion.objects.exists()


def test_what_a_visitor_writes_is_never_rendered_as_html(
    client, small_atlas, curator_client
) -> None:
    _suggest(client, field="title", proposed_value="<b>Bold</b> <script>x()</script>")
    listing = curator_client.get("/admin/atlas/suggestion/").content.decode()
    assert "<script>x()</script>" not in listing and "&lt;script&gt;" in listing
    curator_client.post(
        "/admin/atlas/suggestion/",
        {"action": "approve", "_selected_action": [Suggestion.objects.get().pk]},
    )
    page = client.get("/works/universal-transformers/").content.decode()
    assert "<b>Bold</b>" not in page and "&lt;b&gt;Bold&lt;/b&gt;" in page


def test_anonymous_suggestions_are_rate_limited(client, small_atlas) -> None:
    statuses = [_suggest(client).status_code for _ in range(11)]
    assert statuses[:10] == [302] * 10
    assert statuses[10] == 429
    assert Suggestion.objects.count() == 10


def test_compare_without_a_selection_explains_how_to_pick(client, small_atlas) -> None:
    page = client.get("/compare/").content.decode()
    assert (
        "Nothing selected yet. Tick “Compare” on up to three works in Explore to see their "
        "recurrence, depth control and KV strategy here." in page
    )


@pytest.mark.parametrize("count", [1, 2, 3])
def test_compare_shows_one_column_per_work(client, small_atlas, count) -> None:
    slugs = small_atlas[:count]
    page = client.get(f"/compare/?works={','.join(slugs)}").content.decode()
    assert page.count('<th scope="col">') == count
    for row in [
        "Recurrence family",
        "Depth control",
        "Depth granularity",
        "KV strategy",
        "Modality",
        "Contribution",
        "Training regime",
        "Month",
        "Links",
    ]:
        assert f'<th scope="row">{row}' in page


def test_compare_marks_the_rows_that_differ(client, small_atlas) -> None:
    page = client.get(
        "/compare/?works=universal-transformers,loop-think-generalize"
    ).content.decode()
    assert re.search(r'<tr class="differs">\s*<th scope="row">Recurrence family', page)
    assert re.search(r'<tr>\s*<th scope="row">Depth control', page)  # both halting


def test_compare_names_unknown_slugs_and_leaves_out_a_fourth(client, small_atlas) -> None:
    response = client.get(
        "/compare/?works=universal-transformers,nope,mixture-of-recursions,loop-think-generalize,"
        "looped-diffusion-transformer"
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "No work in the atlas has the slug “nope”." in page
    assert "left out: looped-diffusion-transformer" in page
    assert page.count('<th scope="col">') == 3


def test_picks_are_kept_across_pages_and_a_fourth_is_refused(client, small_atlas) -> None:
    # given three works ticked
    for slug in small_atlas[:3]:
        client.post("/compare/pick/", {"slug": slug, "picked": "1", "next": "/?page=1"})
    # when a fourth is ticked
    response = client.post("/compare/pick/", {"slug": small_atlas[3], "picked": "1", "next": "/"})
    # then it is refused with a message, and the three remain (Compare opens them)
    assert "You can compare up to three works" in client.get(response["Location"]).content.decode()
    page = client.get("/compare/").content.decode()
    assert page.count('<th scope="col">') == 3
    assert "Compare (3 of 3)" in client.get("/?ordering=title").content.decode()


def test_a_pick_can_be_unticked_and_htmx_gets_the_box_and_the_tray(client, small_atlas) -> None:
    client.post("/compare/pick/", {"slug": small_atlas[0], "picked": "1"})
    response = client.post(
        "/compare/pick/", {"slug": small_atlas[0]}, headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert 'name="picked" value="1">' in page  # unticked box
    assert 'id="compare-tray"' in page and 'hx-swap-oob="true"' in page
    assert "Pick up to three works" in page


def test_a_pick_redirect_never_leaves_the_site(client, small_atlas) -> None:
    response = client.post(
        "/compare/pick/", {"slug": small_atlas[0], "picked": "1", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/"


def test_explores_export_links_download_the_same_results(client, small_atlas) -> None:
    # given Explore as its form submits it (empty fields included)
    query = "search=&month_from=&month_to=&ordering=newest&modality=vision"
    page = client.get(f"/?{query}").content.decode()
    found = re.search(r'<a href="(/api/v1/export/\?[^"]*format=csv[^"]*)" download>CSV', page)
    assert found, "Explore has no CSV link"
    link = found[1]
    # when the CSV link is followed
    response = client.get(link.replace("&amp;", "&"))
    # then it holds exactly the works shown
    assert response.status_code == 200
    slugs = {line.split(",")[0] for line in response.content.decode().splitlines()[1:]}
    assert slugs == set(_slugs(client.get(f"/?{query}")))


def test_compare_exports_the_compared_works(client, small_atlas) -> None:
    page = client.get("/compare/?works=universal-transformers,mixture-of-recursions").content
    found = re.search(r'href="(/api/v1/export/\?works=[^"]*format=bibtex)"', page.decode())
    assert found, "Compare has no BibTeX link"
    link = found[1]
    bibtex = client.get(link.replace("&amp;", "&")).content.decode()
    assert bibtex.count("\n@") == 2 and "dehghani2018universal" in bibtex


def test_the_work_page_says_why_each_label_and_what_was_not_applied(client, db) -> None:
    # given a work whose month is a bound and whose KV label has a basis and a conflict
    evidence = {
        "kv_strategy": {
            "note": "Every loop keeps its own cache.",
            "source": "https://example.org/paper",
            "conflict": "A catalogue says shared; not applied.",
        }
    }
    load_rows(1, month="2026-10", month_estimated=True, kv_strategy="per-loop", evidence=evidence)
    # when
    html = client.get("/works/work-1/").content.decode()
    # then
    assert "not before Oct 2026" in html
    assert html.count('<details class="basis"') == 7
    assert "Every loop keeps its own cache." in html
    assert '<a href="https://example.org/paper">https://example.org/paper</a>' in html
    assert "Not applied: A catalogue says shared; not applied." in html
    assert "Classified from the title and summary." in html
    # and Explore and Compare state the month as the bound it is
    assert "not before Oct 2026" in client.get("/").content.decode()
    assert "not before Oct 2026" in client.get("/compare/?works=work-1").content.decode()
