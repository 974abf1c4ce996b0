"""GET /api/v1/works/ and /api/v1/works/<slug>/."""

import pytest

from tests.atlas.conftest import load_rows

pytestmark = pytest.mark.django_db

FIELDS = {
    "slug",
    "title",
    "summary",
    "month",
    "month_estimated",
    "month_label",
    "evidence",
    "authors",
    "authors_et_al",
    "venue",
    "arxiv_id",
    "url",
    "code_url",
    "recurrence_family",
    "depth_control",
    "depth_granularity",
    "kv_strategy",
    "modality",
    "contribution",
    "training_regime",
    "topics",
    "citation_key",
    "facts_confidence",
    "facts_source",
    "reviewed_at",
    "page_url",
}


def _slugs(client, query: str) -> list[str]:
    response = client.get(f"/api/v1/works/?{query}")
    assert response.status_code == 200, response.json()
    return [work["slug"] for work in response.json()["results"]]


def test_the_list_pages_every_work_with_every_field(client, small_atlas) -> None:
    body = client.get("/api/v1/works/").json()
    assert body["count"] == 8 and body["next"] is None
    first = body["results"][0]
    assert set(first) == FIELDS
    assert first["slug"] == "loopfold-parallelizing-recurrent-depth"
    assert (first["month"], first["month_estimated"], first["arxiv_id"]) == ("2026-10", True, None)
    assert first["modality"] == ["language"]
    assert first["contribution"] == ["architecture", "inference-serving"]
    assert first["page_url"] == "http://testserver/works/loopfold-parallelizing-recurrent-depth/"


def test_the_detail_has_the_same_fields(client, small_atlas) -> None:
    work = client.get("/api/v1/works/deja-view-looping-transformers-3d/").json()
    assert set(work) == FIELDS
    assert work["title"] == "Déjà View: Looping Transformers for Multi-View 3D Reconstruction"
    assert work["authors"] == ["Alessandro Burzio", "Laura Leal-Taixé"]
    assert (work["authors_et_al"], work["facts_confidence"]) == (True, "medium")


def test_an_unknown_slug_is_a_404_with_a_message(client, small_atlas) -> None:
    response = client.get("/api/v1/works/no-such-work/")
    assert response.status_code == 404
    assert response.json() == {"detail": "No work with slug 'no-such-work'."}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "recurrence_family=universal&recurrence_family=token-routed&ordering=oldest",
            [
                "universal-transformers",
                "mixture-of-recursions",
                "deja-view-looping-transformers-3d",
                "looped-diffusion-transformer",
            ],
        ),
        ("depth_control=router", ["mixture-of-recursions"]),
        ("depth_granularity=sequence", ["deja-view-looping-transformers-3d"]),
        ("kv_strategy=per-loop", ["loop-think-generalize"]),
        ("training_regime=training-free", ["resid-quant-kv-cache"]),
        (
            "modality=language&modality=algorithmic",
            [
                "loop-think-generalize",
                "universal-transformers",
            ],
        ),
        ("contribution=architecture&contribution=retrofit", ["deja-view-looping-transformers-3d"]),
        ("topics=adaptive-computation", ["mixture-of-recursions", "universal-transformers"]),
        ("month_from=2026&month_to=2026-06", ["deja-view-looping-transformers-3d"]),
        ("search=router", ["mixture-of-recursions"]),
        (
            "works=universal-transformers,t2mlr-temporal-middle-layer-recurrence",
            [
                "t2mlr-temporal-middle-layer-recurrence",
                "universal-transformers",
            ],
        ),
        (
            "ordering=title&page_size=2",
            ["deja-view-looping-transformers-3d", "loop-think-generalize"],
        ),
    ],
)
def test_the_list_takes_every_explore_filter(client, small_atlas, query, expected) -> None:
    assert _slugs(client, query) == expected


def test_pages_never_repeat_or_skip_a_work(client) -> None:
    # given works that share a month (so the order needs its tie-breakers)
    load_rows(23, month="2025-01")
    # when
    seen = [slug for page in (1, 2, 3) for slug in _slugs(client, f"page_size=10&page={page}")]
    # then
    assert len(seen) == len(set(seen)) == 23


@pytest.mark.parametrize("query", ["page_size=5", "page_size=60&modality=language"])
def test_the_list_needs_the_same_queries_for_any_page_size(
    client, django_assert_num_queries, query
) -> None:
    load_rows(60)
    with django_assert_num_queries(3):  # data version, count, the page (tags aggregated in it)
        assert client.get(f"/api/v1/works/?{query}").status_code == 200
