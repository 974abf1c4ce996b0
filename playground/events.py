"""``GET /runs/<id>/events``: a run's events as server-sent events.

The stream, for a viewer that has nothing yet (or resumes after ``Last-Event-ID`` /
``?last_event_id=``, a position):

    event: run                 the run as the API shows it (status, params, trained_loops)
    data: {...}

    id: <position>             one per position after the resume point, in order
    event: token
    data: <TokenEvent JSON>

    : ping                     a comment after PLAYGROUND_SSE_HEARTBEAT_S quiet seconds

    event: done                {"status": "done"|"cancelled", "stats": {...}}
    (or event: error           {"status": "failed", "error": "..."}), then the stream closes.

What is stored comes first, from the database (a late viewer, a permalink replay, a
resume), then live events: from the run's Redis stream in the full stack, by polling the
database in the embedded mode. Positions only increase, so nothing is sent twice and,
since the worker stores each token before it publishes it, nothing is skipped. The view
is async (ASGI), every middleware in front of it is async-capable (so Django runs the
chain on the event loop), and its database reads go through ``pooled``: a viewer waiting
on Redis or sleeping between polls holds no thread and no database connection. An address
may hold ``PLAYGROUND_VISITOR_STREAMS`` open streams; one more is a 429. A database
restart mid-stream is waited out: the viewer gets pings, then the rest of the run.
"""

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from loopatlas.outage import DATABASE_ERRORS
from playground import feeds, selectors, services, streams
from playground.models import Run
from playground.serializers import RunSerializer
from playground.visitors import visitor_address

logger = logging.getLogger(__name__)

POLL_S = 0.1  # embedded mode: how often a live viewer looks for new rows
BATCH = 500


def pooled(function):
    """``function`` as a coroutine run in the shared thread pool, closing the database
    connection it opened.

    Not Django's default (``thread_sensitive``): under ASGI that runs a request's sync
    code in a thread of its own, so every open stream would keep a thread and a database
    connection for as long as it lasts. Here a viewer waiting on Redis or between polls
    holds neither.
    """

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return sync_to_async(call, thread_sensitive=False)


def sse(event: str, data: object, id: int | None = None) -> str:
    lines = [] if id is None else [f"id: {id}"]
    lines += [f"event: {event}", f"data: {json.dumps(data, cls=DjangoJSONEncoder)}"]
    return "\n".join(lines) + "\n\n"


def last_event_id(raw: str | None) -> int | None:
    """The position to resume after (-1: from the start); None when it is malformed."""
    try:
        value = int(raw or "-1")
    except ValueError:
        return None
    return value if value >= -1 else None


class OpenStreams:
    """Event streams open in this process, per client address (``visitor_address``).

    A stream counts from its first chunk until it closes (a ``finally``, so a viewer who
    goes away is counted off too); the view refuses a new one at the cap. Per process:
    with several web processes each holds its own count.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def full(self, address: str) -> bool:
        return self.counts[address] >= settings.PLAYGROUND_VISITOR_STREAMS

    async def counted(self, address: str, chunks: AsyncGenerator[str]) -> AsyncGenerator[str]:
        self.counts[address] += 1
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # its own cleanup now, not at collection
            self.counts[address] -= 1
            if not self.counts[address]:
                del self.counts[address]


open_streams = OpenStreams()


STREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # proxies: pass each event on at once
    "X-Content-Type-Options": "nosniff",
}


@dataclass
class EventsReply:
    """What a request for a run's events gets: the stream, or a refusal and its reason."""

    status: int
    reason: str = ""
    chunks: AsyncGenerator[str] | None = None


async def run_events_open(*, run_id: str, resume: str | None, address: str) -> EventsReply:
    """Open ``run_id``'s event stream for the viewer at ``address`` (``visitor_address``),
    after the position ``resume`` names (``Last-Event-ID``); 400, 404 or 429 otherwise."""
    after = last_event_id(resume)
    if after is None:
        return EventsReply(400, "Last-Event-ID must be a token position (an integer).")
    if open_streams.full(address):
        return EventsReply(
            429,
            "Too many open event streams from your address: at most "
            f"{settings.PLAYGROUND_VISITOR_STREAMS} (PLAYGROUND_VISITOR_STREAMS). "
            "Close one and retry.",
        )
    # the run and its stored events in one read (one connection), the stream's first
    run, stored = await pooled(selectors.run_progress)(run_id=run_id, after=after, limit=BATCH)
    if run is None:
        return EventsReply(404, f"No run with id {run_id}.")
    chunks = run_event_stream(run=run, after=after, stored=stored)
    return EventsReply(200, chunks=open_streams.counted(address, chunks))


async def run_events(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    """The stream through Django (the test client, WSGI); under ASGI, ``playground.asgi``
    serves this path in front of Django, so no per-request thread is held."""
    reply = await run_events_open(
        run_id=str(run_id),
        resume=request.headers.get("Last-Event-ID") or request.GET.get("last_event_id"),
        address=visitor_address(request.META),
    )
    if reply.chunks is None:
        return HttpResponse(reply.reason, status=reply.status, content_type="text/plain")
    return StreamingHttpResponse(reply.chunks, headers=STREAM_HEADERS)


def _block_ms() -> int:
    return max(1, int(settings.PLAYGROUND_SSE_HEARTBEAT_S * 1000))


def run_payload(run: Run) -> dict:
    return dict(RunSerializer(run).data)


class _Relay:
    """One viewer's position in the run and the events it still has to send."""

    def __init__(self, run: Run, after: int, stored: list[dict] | None = None) -> None:
        self.run, self.after = run, after
        self.read = stored  # the stored events after ``after``, read with ``run``
        self.last_sent = time.monotonic()
        self.ended = False

    def tokens(self, events: list[dict]) -> list[str]:
        chunks = []
        for event in events:
            if event["position"] > self.after:  # never twice
                chunks.append(sse("token", event, id=event["position"]))
                self.after = event["position"]
        if chunks:
            self.last_sent = time.monotonic()
        return chunks

    async def stored(self) -> tuple[list[str], bool]:
        """Catch up from the database; the bool says the run has finished (and all its
        tokens are in the chunks, since a run is marked finished after its last token)."""
        chunks: list[str] = []
        while True:
            if self.read is not None:  # read already, with the run as it was then
                run, rows, self.read = self.run, self.read, None
            else:
                run, rows = await pooled(selectors.run_progress)(
                    run_id=self.run.id, after=self.after, limit=BATCH
                )
            self.run = run or self.run
            chunks += self.tokens(rows)
            if len(rows) < BATCH:
                return chunks, self.run.finished

    async def catch_up(self) -> list[str]:
        """The stored events past this viewer, then the end event once the run has
        finished (``ended`` says so)."""
        chunks, finished = await self.stored()
        if finished:
            chunks.append(self.end())
            self.ended = True
        return chunks

    def end(self) -> str:
        event, data = services.run_end_event(self.run)
        return sse(event, data)

    def ping(self) -> str | None:
        if time.monotonic() - self.last_sent < settings.PLAYGROUND_SSE_HEARTBEAT_S:
            return None
        self.last_sent = time.monotonic()
        return ": ping\n\n"

    async def look(self) -> list[str]:
        """On a quiet stream: the stored events past this viewer, then the end once the
        run has finished (``ended``), else a sweep of stale runs. While the database is
        unreachable there is nothing new: the stream waits it out with its pings."""
        after, last_sent = self.after, self.last_sent
        try:
            chunks = await self.catch_up()
            if not self.ended and selectors.run_is_stale(run=self.run):
                await pooled(services.run_fail_stale)()
        except DATABASE_ERRORS as exc:
            logger.warning("run %s: database unreachable (%s), stream waits", self.run.id, exc)
            self.after, self.last_sent = after, last_sent
            return []
        return chunks


async def run_event_stream(
    *, run: Run, after: int = -1, stored: list[dict] | None = None
) -> AsyncGenerator[str]:
    """The SSE text of ``run`` after position ``after`` until its ``done``/``error``;
    ``stored``: its stored events after ``after``, when read with ``run``
    (``selectors.run_progress``), so the stream does not read them again."""
    relay = _Relay(run, after, stored)
    yield sse("run", run_payload(run))
    source = _from_redis(relay) if streams.publishing() else _from_database(relay)
    async for chunk in source:
        yield chunk


async def _from_database(relay: _Relay) -> AsyncIterator[str]:
    while True:
        for chunk in await relay.look():
            yield chunk
        if relay.ended:
            return
        if ping := relay.ping():
            yield ping
        await asyncio.sleep(POLL_S)


async def _from_redis(relay: _Relay) -> AsyncIterator[str]:
    """Live events from the run's Redis stream, after what the database holds. The
    database stays the reference: a position missing from the stream (a publish that
    failed) is read from it before anything later is sent, and when Redis cannot be
    reached the viewer goes on by polling the database."""
    for chunk in await relay.catch_up():
        yield chunk
    if relay.ended:
        return
    client = await streams.reading_client()
    key = streams.stream_key(relay.run.id)
    start = streams.after_position_id(relay.after)
    async with feeds.watching(client, key, start, _block_ms()) as feed:
        async for chunk in _from_feed(relay, feed):
            yield chunk


async def _from_feed(relay: _Relay, feed: feeds.RunFeed) -> AsyncIterator[str]:
    """The viewer's side of the run's shared read (:mod:`playground.feeds`)."""
    from redis.exceptions import RedisError

    while True:
        start = streams.after_position_id(relay.after)
        try:
            entries = await feed.read(start, settings.PLAYGROUND_SSE_HEARTBEAT_S)
        except RedisError:
            logger.warning("run %s: Redis unreachable, polling the database", relay.run.id)
            async for chunk in _from_database(relay):
                yield chunk
            return
        if not entries:  # quiet: a heartbeat, and a look at the run in the database
            yield ": ping\n\n"
            relay.last_sent = time.monotonic()
            for chunk in await relay.look():
                yield chunk
            if relay.ended:
                return
            continue
        for _entry_id, fields in entries:
            kind, data = fields[b"event"].decode(), json.loads(fields[b"data"])
            if kind == "token":
                if data["position"] > relay.after + 1:  # a gap: fill it from the store
                    chunks, _ = await relay.stored()
                    for chunk in chunks:
                        yield chunk
                for chunk in relay.tokens([data]):
                    yield chunk
                continue
            # The end: first anything stored but never published (a worker that died
            # between the two), then the final event as the database has it.
            chunks, _ = await relay.stored()
            for chunk in chunks:
                yield chunk
            yield relay.end() if relay.run.finished else sse(kind, data)
            return
