"""Paging bounds, error answers and the rendered-answer cache, as a client meets them."""

import json

import pytest

from atlas.models import Work

pytestmark = pytest.mark.django_db


def test_the_schema_states_the_paging_bounds_the_api_enforces(client) -> None:
    response = client.get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    parameters = json.loads(response.content)["paths"]["/api/v1/works/"]["get"]["parameters"]
    schemas = {p["name"]: p["schema"] for p in parameters if p["name"] in {"page", "page_size"}}
    assert schemas == {
        "page": {"type": "integer", "minimum": 1},
        "page_size": {"type": "integer", "minimum": 1, "maximum": 200},
    }


@pytest.mark.parametrize(("page_size", "count"), [("1", 1), ("200", 8), (None, 8)])
def test_page_sizes_within_the_bounds_are_honoured(client, small_atlas, page_size, count):
    query = f"?page_size={page_size}" if page_size else ""
    body = client.get(f"/api/v1/works/{query}").json()
    assert len(body["results"]) == count and body["count"] == 8


def test_an_error_answer_carries_no_validator_and_is_never_cached(client, small_atlas) -> None:
    # given an error for a request
    first = client.get("/api/v1/export/?format=csv&kv_strategy=enormous")
    # then it has no validator to revalidate, and is computed afresh each time
    assert first.status_code == 400 and not first.has_header("ETag")
    assert client.get("/api/v1/export/?format=csv&kv_strategy=enormous").json() == first.json()


def test_with_the_cache_off_every_read_is_computed_afresh(client, small_atlas, settings) -> None:
    # given an answer cached while the cache was on, then the cache turned off (a read
    # the export store does not keep)
    first = client.get("/api/v1/works/")
    settings.API_CACHE_SECONDS = 0
    # when a work changes without a reviewed change (the data version stays)
    Work.objects.filter(slug="universal-transformers").update(title="Renamed in place")
    again = client.get("/api/v1/works/")
    # then the answer shows it: nothing is served from the cache
    assert again["ETag"] == first["ETag"]
    assert b"Renamed in place" in again.content and b"Renamed in place" not in first.content


def test_a_not_modified_answer_carries_the_caching_headers(client, small_atlas) -> None:
    etag = client.get("/api/v1/works/")["ETag"]
    response = client.get("/api/v1/works/", headers={"If-None-Match": etag})
    assert response.status_code == 304
    assert response["Cache-Control"] == "public, max-age=60" and "Accept" in response["Vary"]
    assert response.has_header("Last-Modified")
