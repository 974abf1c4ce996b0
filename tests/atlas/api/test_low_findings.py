"""Requests the hostile review answered with a 500 (as HTML): each is now a 4xx in the
API's JSON error shape. Sent as production would answer them (DEBUG off, exceptions
turned into responses, not raised into the test)."""

import pytest
from django.test import Client

from atlas.models import Suggestion

pytestmark = pytest.mark.django_db

WORK = "universal-transformers"


@pytest.fixture
def anyone(settings) -> Client:
    settings.DEBUG = False
    return Client(raise_request_exception=False)


def _api_error(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    return body


@pytest.mark.parametrize(
    ("path", "status", "parameter"),
    [
        ("/api/v1/changes/?since=²", 400, "since"),  # "²".isdigit(), but int("²") fails
        ("/api/v1/changes/?since=١٢", 400, "since"),  # Arabic-Indic digits: not a version
        ("/api/v1/changes/?page_size=²", 400, "page_size"),
        ("/api/v1/works/?page_size=²", 400, "page_size"),
        ("/api/v1/works/?page_size=٣", 400, "page_size"),
        ("/api/v1/export/versions/9999-12-31T23:59:59Z/", 404, None),  # the second after: overflow
        ("/api/v1/export/versions/0001-01-01T00:00:00Z/", 404, None),
    ],
)
def test_odd_digits_and_dates_are_client_errors(anyone, small_atlas, path, status, parameter):
    body = _api_error(anyone.get(path), status)
    if parameter:
        assert list(body["errors"]) == [parameter]


def test_a_version_in_the_last_second_there_is_is_found(anyone, small_atlas) -> None:
    # given the newest change stamped in the very last second a datetime holds
    from datetime import UTC, datetime

    from atlas.models import AtlasChange

    AtlasChange.objects.filter(pk=AtlasChange.objects.latest("id").pk).update(
        at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    )
    # when / then: its time names it
    response = anyone.get("/api/v1/export/versions/9999-12-31T23:59:59Z/?format=json")
    assert response.status_code == 200
    assert response.json()["data_version"] == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("month", ["0000-01", "0000-12"])
def test_a_suggested_month_of_year_zero_is_refused_by_the_api(anyone, small_atlas, month):
    body = {"work": WORK, "field": "month", "proposed_value": month, "rationale": "r"}
    response = anyone.post("/api/v1/suggestions/", body, content_type="application/json")
    body = _api_error(response, 400)
    assert "YYYY-MM" in body["errors"]["proposed_value"][0]
    assert not Suggestion.objects.exists()


def test_a_suggested_month_of_year_zero_is_refused_by_the_page(anyone, small_atlas) -> None:
    form = {"field": "month", "proposed_value": "0000-01", "rationale": "r"}
    response = anyone.post(f"/works/{WORK}/suggest/", form)
    assert response.status_code == 400
    assert "is not a month in the form YYYY-MM" in response.content.decode()
    assert not Suggestion.objects.exists()


def test_options_on_the_docs_page_is_a_json_405(anyone) -> None:
    response = anyone.options("/api/docs/")
    _api_error(response, 405)
    assert "OPTIONS" not in response["Allow"]
    assert anyone.get("/api/docs/").status_code == 200
