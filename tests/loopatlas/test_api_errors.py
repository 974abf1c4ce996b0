"""Errors no API view shapes (a bug, an unknown route, Django refusing a request) are JSON
under /api/, in the API's error shape; the pages keep Django's HTML answers."""

import pytest
from django.test import Client
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from loopatlas.urls import handler400, handler403, handler404, handler500  # noqa: F401
from loopatlas.urls import urlpatterns as site_urlpatterns


class Broken(APIView):
    def get(self, request: Request) -> Response:
        raise RuntimeError("a bug, with a secret in its message")


def broken_page(request):
    raise RuntimeError("a bug, with a secret in its message")


# This module is the URL configuration of its tests: the site's routes, the site's error
# handlers (imported above), and two that fail.
urlpatterns = [
    path("api/v1/broken/", Broken.as_view()),
    path("broken/", broken_page),
    *site_urlpatterns,
]


@pytest.fixture
def anyone(settings) -> Client:
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    return Client(raise_request_exception=False)


def _json_error(response, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == ["detail"]
    return body["detail"]


def test_an_unexpected_exception_in_the_api_is_a_json_500(anyone, caplog) -> None:
    response = anyone.get("/api/v1/broken/")
    detail = _json_error(response, 500)
    assert "secret" not in detail
    assert "a bug, with a secret" in caplog.text  # the cause goes to the log


def test_an_unexpected_exception_in_a_page_is_still_the_html_500(anyone) -> None:
    response = anyone.get("/broken/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")


def test_an_unknown_api_route_is_a_json_404(anyone) -> None:
    _json_error(anyone.get("/api/v1/no-such-thing/"), 404)
    assert anyone.get("/no-such-page/")["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_a_request_django_refuses_is_a_json_400_in_the_api(anyone) -> None:
    # given more query parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS
    query = "&".join(f"f{n}=1" for n in range(1200))
    # when / then
    _json_error(anyone.get(f"/api/v1/works/?{query}"), 400)
