"""The event streams as a plain ASGI app, in front of Django (``loopatlas.asgi``).

Django's ASGI handler runs each request inside a ``ThreadSensitiveContext``, and the first
sync step of the request (a ``request_started`` receiver, any ``MiddlewareMixin``) starts
that context's own thread, which lives until the response ends: a thread per open stream,
however async the view. Here ``/runs/<id>/events`` never enters that handler. It shares
everything else with the Django view (``playground.events.run_events_open``): the resume
point, the per-address cap, the relay, and database reads on the shared pool. What
Django's middleware would do for this path is done here with Django's own code: the
``ALLOWED_HOSTS`` check, and ``SecurityMiddleware``'s HTTPS redirect and headers (HSTS),
read from the same settings (``SECURE_SSL_REDIRECT``, ``SECURE_HSTS_*``,
``SECURE_PROXY_SSL_HEADER``, which ``BEHIND_TLS_PROXY`` sets).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.http.response import HttpResponseBase
from django.middleware.security import SecurityMiddleware
from django.urls.converters import UUIDConverter

from playground.events import STREAM_HEADERS, run_events_open
from playground.visitors import visitor_address

# As the ASGI spec (and Django's handler) has them: the scope is a dict, messages mappings.
Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The path Django's URL (``<uuid:run_id>``) matches, and only that: any other goes to Django.
EVENTS_PATH = re.compile(rf"/runs/(?P<run_id>{UUIDConverter.regex})/events")


def with_event_streams(django_app: ASGIApp) -> ASGIApp:
    """``django_app`` with the event-stream path served by ``events_app`` in front."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        match = EVENTS_PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await django_app(scope, receive, send)
        else:
            await events_app(scope, receive, send, run_id=match["run_id"])

    return application


async def events_app(scope: Scope, receive: Receive, send: Send, *, run_id: str) -> None:
    request = ASGIRequest(scope, io.BytesIO())
    security = SecurityMiddleware(_no_view)  # per request: it reads the settings as made
    refusal = _refusal(request, security)
    if refusal is None:
        reply = await run_events_open(
            run_id=run_id,
            resume=request.headers.get("last-event-id") or request.GET.get("last_event_id"),
            address=visitor_address(request.META),
        )
        if reply.chunks is not None:
            try:
                head = HttpResponse(headers=STREAM_HEADERS)
                security.process_response(request, head)
                await _start(send, head)
            except BaseException:
                await reply.chunks.aclose()
                raise
            await _relay(reply.chunks, receive, send)
            return
        refusal = _plain(reply.status, reply.reason)
    security.process_response(request, refusal)  # its headers (HSTS), set in place
    await _start(send, refusal)
    await send({"type": "http.response.body", "body": refusal.content})


def _refusal(request: HttpRequest, security: SecurityMiddleware) -> HttpResponse | None:
    """What Django would answer instead of the view: 405, 400 for a Host outside
    ``ALLOWED_HOSTS``, or the redirect to HTTPS (``SECURE_SSL_REDIRECT``)."""
    if request.method not in ("GET", "HEAD"):
        refusal = _plain(405, "Only GET reads a run's events.")
        refusal["Allow"] = "GET, HEAD"
        return refusal
    if not host_allowed(request.headers.get("host", "")):
        return _plain(400, "Invalid Host header.")
    return security.process_request(request)


def _no_view(request: HttpRequest) -> HttpResponseBase:
    raise NotImplementedError  # SecurityMiddleware only checks and decorates here


def host_allowed(host: str) -> bool:
    """Django's ``ALLOWED_HOSTS`` check, which this path would otherwise skip (it never
    enters Django's handler): a forged Host gets no stream, as it gets no page."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # Django's own DEBUG default
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


async def _relay(chunks: AsyncGenerator[str], receive: Receive, send: Send) -> None:
    """Send each chunk as it comes, until the stream ends or the viewer goes away (then
    the relay is cancelled where it waits, and its ``finally`` blocks run)."""

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    disconnect = asyncio.ensure_future(gone())
    try:
        while True:
            following = asyncio.ensure_future(anext(chunks))
            await asyncio.wait({following, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await following
                return
            try:
                chunk = following.result()
            except StopAsyncIteration:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
    finally:
        disconnect.cancel()
        await chunks.aclose()


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")


async def _start(send: Send, response: HttpResponse) -> None:
    """Send ``response``'s status and headers."""
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
