"""GET facets/, timeline/ and compare/: the data behind Explore's panels, chart and Compare."""

import pytest

from tests.atlas.conftest import load_rows

pytestmark = pytest.mark.django_db


def _facets(client, query: str = "") -> dict[str, dict]:
    body = client.get(f"/api/v1/facets/?{query}").json()
    return {facet["name"]: facet for facet in body["facets"]}


def test_facets_give_each_vocabulary_with_labels_descriptions_and_counts(client, small_atlas):
    facets = _facets(client)
    assert list(facets) == [
        "recurrence_family",
        "depth_control",
        "depth_granularity",
        "kv_strategy",
        "modality",
        "contribution",
        "training_regime",
        "has_code",
        "topics",
    ]
    universal = facets["recurrence_family"]["values"][0]
    assert universal["slug"] == "universal" and universal["count"] == 3
    assert universal["label"] == "Universal / weight-tied stack"
    assert universal["description"].startswith("the whole stack")
    assert facets["modality"]["multi"] is True
    topics = {value["slug"]: value["count"] for value in facets["topics"]["values"]}
    assert topics["kv-cache"] == 2


def test_facet_counts_follow_the_filters(client, small_atlas) -> None:
    facets = _facets(client, "recurrence_family=universal")
    depth = {v["slug"]: v["count"] for v in facets["depth_control"]["values"]}
    assert depth == {
        "fixed": 0,
        "elastic": 1,
        "halting": 1,
        "exit-gate": 0,
        "router": 0,
        "convergence": 1,
        "unspecified": 0,
    }
    family = {v["slug"]: (v["count"], v["selected"]) for v in facets["recurrence_family"]["values"]}
    assert family["universal"] == (3, True) and family["token-routed"] == (1, False)


def test_the_timeline_counts_by_month_and_family(client, small_atlas) -> None:
    body = client.get("/api/v1/timeline/?modality=language").json()
    assert body["count"] == 6
    assert body["buckets"][0] == {
        "month": "2018-07",
        "recurrence_family": "universal",
        "works": 1,
        "estimated": 0,
    }
    assert {
        "month": "2026-10",
        "recurrence_family": "parallel-loop",
        "works": 1,
        "estimated": 1,
    } in body["buckets"]


def test_compare_gives_the_works_and_the_fields_that_differ(client, small_atlas) -> None:
    body = client.get("/api/v1/compare/?works=universal-transformers,loop-think-generalize").json()
    assert [work["slug"] for work in body["works"]] == [
        "universal-transformers",
        "loop-think-generalize",
    ]
    assert "recurrence_family" in body["differences"]
    assert "depth_control" not in body["differences"]  # both halting


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "give 1 to 3 work slugs, not 0"),
        ("works=a,b,c,d", "give 1 to 3 work slugs, not 4"),
        ("works=universal-transformers,nope,zilch", "no work with slug nope, zilch"),
        ("works=Not A Slug", "not work slugs: Not A Slug"),
    ],
)
def test_compare_refuses_bad_selections_naming_them(client, small_atlas, query, message):
    response = client.get(f"/api/v1/compare/?{query}")
    assert response.status_code == 400
    assert response.json()["errors"]["works"] == [message]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/api/v1/facets/?modality=language", 3),  # version, single facets at once, tags
        ("/api/v1/facets/?kv_strategy=shared&depth_control=fixed", 5),  # + one per filtered
        ("/api/v1/timeline/?modality=language", 2),  # version, buckets
        ("/api/v1/export/?format=csv&modality=language", 2),  # version, works with tags
    ],
)
@pytest.mark.parametrize("works", [3, 80])
def test_reads_need_the_same_queries_for_few_and_many_works(
    client, django_assert_num_queries, url, expected, works
) -> None:
    load_rows(works)
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200
