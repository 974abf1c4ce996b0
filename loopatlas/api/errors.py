"""Django's own error answers under ``/api/``: JSON in the API's error shape, never HTML.

DRF shapes what its views raise (``conventions.exception_handler``); these cover what it
never sees: an exception nothing handles (a bug, 500), a URL no route matches (404), and
Django's refusals around a view (400: too many fields, a bad host). Elsewhere they are
Django's own pages, unchanged.
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions

API_PREFIX = "/api/"


def is_api(request: HttpRequest) -> bool:
    """Whether the request is the API's, so that its errors answer JSON."""
    return request.path.startswith(API_PREFIX)


def _error(status: int, detail: object) -> HttpResponse:
    return JsonResponse({"detail": str(detail)}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return _error(400, exceptions.ParseError.default_detail)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return _error(403, exceptions.PermissionDenied.default_detail)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return _error(404, exceptions.NotFound.default_detail)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """The cause is logged by Django (``django.request``); the client learns only that."""
    if is_api(request):
        return _error(500, exceptions.APIException.default_detail)
    return defaults.server_error(request)
