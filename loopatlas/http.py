"""The request type of views behind django-htmx's middleware (django-htmx's typing recipe)."""

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """An ``HttpRequest`` with the ``htmx`` attribute that ``HtmxMiddleware`` sets."""

    htmx: HtmxDetails
