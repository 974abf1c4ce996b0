"""The event streams as a plain ASGI app, in front of Django (``loopatlas.asgi``).

Django's ASGI handler runs each request inside a ``ThreadSensitiveContext``, and the first
sync step of the request (a ``request_started`` receiver, any ``MiddlewareMixin``) starts
that context's own thread, which lives until the response ends: a thread per open stream,
however async the view. Here ``/runs/<id>/events`` never enters that handler. It shares
everything else with the Django view (``playground.events.run_events_open``): the resume
point, the per-address cap, the relay, and database reads on the shared pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from playground.events import STREAM_HEADERS, run_events_open
from playground.visitors import visitor_address

# As the ASGI spec (and Django's handler) has them: the scope is a dict, messages mappings.
Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EVENTS_PATH = re.compile(r"/runs/(?P<run_id>[0-9a-fA-F-]{36})/events")


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
    headers = {name.decode("latin-1").lower(): v.decode("latin-1") for name, v in scope["headers"]}
    if scope["method"] not in ("GET", "HEAD"):
        await _plain(send, 405, "Only GET reads a run's events.", [(b"allow", b"GET, HEAD")])
        return
    if not host_allowed(headers.get("host", "")):
        await _plain(send, 400, "Invalid Host header.")
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    meta = {"REMOTE_ADDR": (scope.get("client") or ("", 0))[0]}
    if "x-forwarded-for" in headers:
        meta["HTTP_X_FORWARDED_FOR"] = headers["x-forwarded-for"]
    reply = await run_events_open(
        run_id=run_id,
        resume=headers.get("last-event-id") or query.get("last_event_id", [None])[0],
        address=visitor_address(meta),
    )
    if reply.chunks is None:
        await _plain(send, reply.status, reply.reason)
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(k.lower().encode(), v.encode()) for k, v in STREAM_HEADERS.items()],
        }
    )
    await _relay(reply.chunks, receive, send)


def host_allowed(host: str) -> bool:
    """Django's ``ALLOWED_HOSTS`` check, which this path would otherwise skip (it never
    builds a Django request): a forged Host gets no stream, as it gets no page."""
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


async def _plain(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text.encode()})
