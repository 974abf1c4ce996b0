"""The conventions of loopatlas/api/conventions.py, on the atlas's endpoints."""

import time

import pytest
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from atlas.models import AtlasChange, Work
from atlas.services import atlas_change_record

pytestmark = pytest.mark.django_db


def test_an_unknown_filter_value_is_a_400_naming_the_parameter_and_allowed_values(
    client, small_atlas
) -> None:
    response = client.get("/api/v1/works/?recurrence_family=loopy")
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith("recurrence_family: 'loopy' is not an allowed")
    assert (
        "allowed: universal, looped-lm, prelude-core-coda" in body["errors"]["recurrence_family"][0]
    )


def test_an_unknown_parameter_is_refused_not_ignored(client, small_atlas) -> None:
    response = client.get("/api/v1/works/?recurence_family=universal")
    assert response.status_code == 400
    message = response.json()["errors"]["recurence_family"][0]
    assert message.startswith("unknown parameter; allowed:") and "recurrence_family" in message


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("page_size=0", "must be a whole number from 1 to 200"),
        ("page_size=201", "must be a whole number from 1 to 200"),
        ("page_size=ten", "must be a whole number from 1 to 200"),
        ("format=xml", "'xml' is not a format this endpoint offers; allowed: json"),
    ],
)
def test_paging_and_format_errors_are_400s(client, small_atlas, query, message) -> None:
    response = client.get(f"/api/v1/works/?{query}")
    assert response.status_code == 400
    assert message in response.json()["detail"]


def test_a_page_past_the_end_is_a_404_in_the_same_shape(client, small_atlas) -> None:
    response = client.get("/api/v1/works/?page=9")
    assert response.status_code == 404 and set(response.json()) == {"detail"}


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/works/",
        "/api/v1/works/universal-transformers/",
        "/api/v1/facets/",
        "/api/v1/timeline/",
        "/api/v1/compare/?works=universal-transformers",
        "/api/v1/export/?format=csv",
    ],
)
def test_reads_answer_conditional_requests_until_the_data_changes(client, small_atlas, url):
    # given a first answer
    first = client.get(url)
    etag, modified = first["ETag"], first["Last-Modified"]
    assert first.status_code == 200 and "Accept" in first["Vary"]
    assert first["Cache-Control"] == "public, max-age=60"
    # then the same request with either validator is answered 304
    not_modified = client.get(url, headers={"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified["ETag"] == etag
    assert client.get(url, headers={"If-Modified-Since": modified}).status_code == 304
    # when the data changes, the validator no longer matches
    atlas_change_record(kind=AtlasChange.Kind.EDIT, summary="a reviewed change")
    changed = client.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed["ETag"] != etag


def test_different_representations_have_different_etags(client, small_atlas) -> None:
    csv = client.get("/api/v1/export/?format=csv")["ETag"]
    ris = client.get("/api/v1/export/?format=ris")["ETag"]
    filtered = client.get("/api/v1/export/?format=csv&modality=vision")["ETag"]
    assert len({csv, ris, filtered}) == 3


def test_the_schema_and_its_docs_page_are_served_without_a_cdn(client) -> None:
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/works/" in schema.content
    docs = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in docs
    assert "cdn." not in docs and "unpkg" not in docs and "jsdelivr" not in docs
    assert "/static/drf_spectacular_sidecar/" in docs


def test_a_repeated_read_is_served_from_the_cache_until_the_data_changes(
    client, small_atlas, django_assert_num_queries
) -> None:
    # given a first answer
    first = client.get("/api/v1/export/?format=csv")
    # then the same request needs only the data version
    with django_assert_num_queries(1):
        again = client.get("/api/v1/export/?format=csv")
    assert again.content == first.content
    assert again["Content-Disposition"] == first["Content-Disposition"]
    # and after a reviewed change it is computed afresh
    Work.objects.filter(slug="universal-transformers").update(title="Changed")
    atlas_change_record(kind=AtlasChange.Kind.EDIT, summary="retitled")
    assert b"Changed" in client.get("/api/v1/export/?format=csv").content


def test_reordered_and_repeated_parameters_share_one_etag_and_cache_entry(
    client, small_atlas, django_assert_num_queries
) -> None:
    # given one answer
    first = client.get("/api/v1/export/?format=csv&modality=language&contribution=architecture")
    # when the same parameters come in another order, one of them twice
    query = "contribution=architecture&modality=language&format=csv&modality=language"
    with django_assert_num_queries(1):  # the data version only: the rest is cached
        again = client.get(f"/api/v1/export/?{query}")
    # then
    assert again.content == first.content and again["ETag"] == first["ETag"]
    # while the negotiated media type still picks its own entry
    url = "/api/v1/export/?modality=language"
    as_csv, as_json = (client.get(url, HTTP_ACCEPT=media) for media in ("text/csv", "*/*"))
    assert as_csv["ETag"] != as_json["ETag"] and as_csv.content != as_json.content


def test_every_refused_parameter_is_named_once_in_the_detail_and_the_errors(
    client, small_atlas
) -> None:
    response = client.get("/api/v1/works/?modality=smell&ordering=random")
    assert response.status_code == 400
    body = response.json()
    assert set(body["errors"]) == {"modality", "ordering"}
    assert all(len(messages) == 1 for messages in body["errors"].values())
    assert body["detail"] == "; ".join(
        f"{name}: {messages[0]}" for name, messages in body["errors"].items()
    )


def test_unknown_parameters_name_every_one_allowed_there(client, small_atlas) -> None:
    paged = client.get("/api/v1/works/?zzz=1&aaa=2").json()["errors"]
    unpaged = client.get("/api/v1/facets/?zzz=1").json()["errors"]["zzz"][0]

    assert list(paged) == ["aaa", "zzz"]
    assert paged["zzz"][0] == (
        "unknown parameter; allowed: author, contribution, depth_control, depth_granularity,"
        " format, has_code, kv_strategy, modality, month_from, month_to, ordering, page, page_size,"
        " recurrence_family, search, topics, training_regime, works"
    )
    assert "page" not in unpaged and "format, has_code, kv_strategy" in unpaged


def test_an_unknown_format_names_every_format_the_endpoint_offers(client, small_atlas) -> None:
    response = client.get("/api/v1/export/?format=xml")
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert response.json()["errors"] == {
        "format": ["'xml' is not a format this endpoint offers; allowed: json, csv, bibtex, ris"]
    }


@pytest.mark.parametrize(
    ("data", "body"),
    [
        (["the whole request"], {"non_field_errors": ["the whole request"]}),
        ({"page_size": ["too big", "not whole"]}, {"page_size": ["too big", "not whole"]}),
        (
            {"params": {"q": ["above 1"], "loops": ["below 1"]}},
            {"params": ["q: above 1", "loops: below 1"]},
        ),
    ],
)
def test_every_error_shape_becomes_one_detail_and_flat_messages(data, body) -> None:
    request = Request(APIRequestFactory().get("/api/v1/works/", HTTP_ACCEPT="text/csv"))
    handler = APIView().get_exception_handler()  # the configured one, conventions.py's
    response = handler(ValidationError(data), {"request": request})
    detail = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in body.items())
    assert response.data == {"detail": detail, "errors": body}
    assert request.accepted_media_type == "application/json"


def test_a_cached_answer_lasts_api_cache_seconds(client, small_atlas, settings, monkeypatch):
    # given an answer cached for a minute (a read the export store does not keep)
    settings.API_CACHE_SECONDS = 60
    first = client.get("/api/v1/works/")
    # when a work changes in place (the data version stays)
    Work.objects.filter(slug="universal-transformers").update(title="Renamed in place")
    # then the cached answer is served within the minute, and a fresh one after it
    assert client.get("/api/v1/works/").content == first.content
    later = time.time() + 61
    monkeypatch.setattr(time, "time", lambda: later)
    assert b"Renamed in place" in client.get("/api/v1/works/").content
