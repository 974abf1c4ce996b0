"""What every endpoint under ``/api/v1/`` shares (wired up in ``REST_FRAMEWORK`` settings).

- Errors are JSON ``{"detail": "<one sentence>", "errors": {"<parameter>": [...]}}``,
  whatever format the request asked for, so a client never parses an error as CSV; what
  no DRF view answers (a bug's 500, an unknown route) is JSON too (``loopatlas.api.errors``).
- Unknown query parameters and unknown ``format`` values are 400s that name the allowed
  ones: a typo is an error, never a silently unfiltered answer.
- Pages: ``page`` and ``page_size`` (at most ``MAX_PAGE_SIZE``).
- Reads carry ``ETag`` and ``Last-Modified`` derived from a content version and answer
  conditional requests with 304 (``conditional``).
"""

import functools
import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.utils.http import http_date
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from loopatlas.querystring import query_normalised

MAX_PAGE_SIZE = 200
READ_MAX_AGE_SECONDS = 60  # how long shared caches may keep a read before revalidating


def exception_handler(exc, context):
    """DRF's handler, with one JSON error shape and JSON whatever renderer was chosen."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    request = context["request"]
    request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
    response.data = _error_body(response.data)
    return response


def _messages(value) -> list[str]:
    if isinstance(value, dict):
        return [f"{key}: {message}" for key, inner in value.items() for message in _messages(inner)]
    if isinstance(value, list):
        return [message for item in value for message in _messages(item)]
    return [str(value)]


def _error_body(data) -> dict:
    if isinstance(data, dict) and set(data) == {"detail"}:
        return {"detail": str(data["detail"])}
    errors = data if isinstance(data, dict) else {"non_field_errors": data}
    errors = {str(name): _messages(value) for name, value in errors.items()}
    detail = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
    return {"detail": detail, "errors": errors}


class PageNumberPagination(pagination.PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        # isdigit() alone takes "²", which int() refuses: ASCII digits only.
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= self.max_page_size:
            raise ValidationError(
                {self.page_size_query_param: [f"must be a whole number from 1 to {MAX_PAGE_SIZE}"]}
            )
        return int(raw)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.page_query_param: {"minimum": 1},
            self.page_size_query_param: {"minimum": 1, "maximum": MAX_PAGE_SIZE},
        }
        for parameter in parameters:  # DRF's two: page and page_size
            parameter["schema"] |= bounds[parameter["name"]]
        return parameters


class FormatNegotiation(DefaultContentNegotiation):
    """An unknown ``?format=`` is a 400 naming the formats the endpoint offers."""

    def filter_renderers(self, renderers, format):
        kept = [renderer for renderer in renderers if renderer.format == format]
        if not kept:
            allowed = ", ".join(renderer.format for renderer in renderers)
            message = f"{format!r} is not a format this endpoint offers; allowed: {allowed}"
            raise ValidationError({api_settings.URL_FORMAT_OVERRIDE: [message]})
        return kept


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, refusing parameters that are neither filters nor paging/format."""

    def get_valid_filterset(self, request, queryset, view):
        filterset = self.get_filterset(request, queryset, view)
        allowed = {api_settings.URL_FORMAT_OVERRIDE, *getattr(view, "extra_query_params", ())}
        paginator = view.paginator  # a GenericAPIView's; None when it does not page
        if paginator is not None:
            allowed |= {paginator.page_query_param, paginator.page_size_query_param}
        if filterset is not None:
            allowed |= set(filterset.filters)
        unknown = sorted(set(request.query_params) - allowed)
        if unknown:
            names = ", ".join(sorted(allowed))
            raise ValidationError(
                {name: [f"unknown parameter; allowed: {names}"] for name in unknown}
            )
        if filterset is not None and not filterset.is_valid():
            raise ValidationError(filterset.errors)
        return filterset

    def filter_queryset(self, request, queryset, view):
        filterset = self.get_valid_filterset(request, queryset, view)
        return queryset if filterset is None else filterset.qs


class ContentVersion(Protocol):
    """Anything that changes whenever the content behind a response changes."""

    @property
    def tag(self) -> str: ...

    @property
    def at(self) -> datetime: ...


def conditional(version: Callable[[], ContentVersion]):
    """Decorate a read action: ETag/Last-Modified from ``version()``, 304 when unchanged.

    The ETag also covers the absolute URL (its query normalised, so reordered or repeated
    parameters share one entry) and the negotiated media type, since those pick the
    representation of that content version. Being that precise, it also keys a
    cache of the rendered answers (``API_CACHE_SECONDS``; 0 turns it off): a version never
    changes, so nothing cached can go stale. The version is left on the view as
    ``content_version`` so the action need not read it again.
    """

    def decorator(action):
        @functools.wraps(action)
        def wrapped(view, request, *args, **kwargs):
            current = view.content_version = version()
            url = request.build_absolute_uri(request.path) + "?" + query_normalised(request.GET)
            seed = f"{current.tag}|{url}|{request.accepted_media_type}"
            etag = '"' + hashlib.sha256(seed.encode()).hexdigest()[:32] + '"'
            modified = int(current.at.timestamp())
            response: HttpResponseBase | None = get_conditional_response(
                request, etag=etag, last_modified=modified
            )
            if response is None:
                response = _cached_action(f"api:{etag}", action, view, request, *args, **kwargs)
            if response.status_code in (200, 304):
                response["ETag"], response["Last-Modified"] = etag, http_date(modified)
                patch_vary_headers(response, ["Accept"])
                patch_cache_control(response, public=True, max_age=READ_MAX_AGE_SECONDS)
            return response

        return wrapped

    return decorator


def _cached_action(key: str, action, view, request, *args, **kwargs) -> HttpResponseBase:
    """The action's rendered answer, from the cache when it holds one (an answer sent from
    a stored file, as a whole-atlas export, is not copied into the cache)."""
    seconds = settings.API_CACHE_SECONDS
    if not seconds:
        return action(view, request, *args, **kwargs)
    cached = cache.get(key)
    if cached is not None:
        content, headers = cached
        return HttpResponse(content, headers=headers)
    response = action(view, request, *args, **kwargs)
    if isinstance(response, SimpleTemplateResponse) and response.status_code == 200:
        response = view.finalize_response(request, response, *args, **kwargs)
        response.render()
        cache.set(key, (response.content, dict(response.items())), seconds)
    return response
