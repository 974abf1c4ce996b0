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
resume), a page of ``PAGE`` positions per read, so a long run's replay is never held
whole in memory; then live events, through the run's shared feed (:mod:`playground.feeds`):
one reader per run and event loop, whatever the number of viewers, reading the run's Redis
stream in the full stack and polling the database in the embedded mode (or while Redis
cannot be reached), every ``POLL_MIN_S`` while tokens come, backing off to ``POLL_MAX_S``
on a quiet run. Positions only increase, so nothing is sent twice and, since the worker
stores each token before it publishes it, nothing is skipped: the feed reads a position
missing from the Redis stream from the database, and looks at the database after each
quiet heartbeat (a run ended without its end published, a stale run to fail). The view
is async (ASGI), every middleware in front of it is async-capable (so Django runs the
chain on the event loop), and its database reads go through ``pooled``: a viewer waiting
on its feed holds no thread and no database connection. An address may hold
``PLAYGROUND_VISITOR_STREAMS`` open streams (``OpenStreams``); one more is a 429. A
database restart mid-stream is waited out: the viewer gets pings, then the rest of the run.
"""

import asyncio
import json
import logging
import threading
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

PAGE = 64  # positions per database read: a replay, a catch-up, a poll
POLL_MIN_S = 0.1  # the database feed looks again this soon after new events...
POLL_MAX_S = 2.0  # ...and backs off, doubling, to this on a quiet run


def pooled(function):
    """``function`` as a coroutine run in the shared thread pool, closing the database
    connection it opened.

    Not Django's default (``thread_sensitive``): under ASGI that runs a request's sync
    code in a thread of its own, so every open stream would keep a thread and a database
    connection for as long as it lasts. Here a viewer waiting on its feed holds neither.
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

    A slot is taken (``take``: the check and the count under one lock, with no await
    between them) before anything else the opening awaits, so a burst of concurrent opens
    cannot all pass a check made before any of them counted. It is given back when the
    stream ends, fails or is closed, or when it is collected unclosed (``held`` starts the
    stream at once, and asyncio closes a started async generator it finds dropped).

    In this process rather than in Redis, on purpose: what the cap protects is this
    process (its event loop, memory and the database reads made for its viewers), the
    site runs one web process, and a count that lives in the process dies with it, so a
    crash cannot leak a slot (a shared counter would need an expiry longer than the
    longest stream, and would hold a crashed process's slots until then). With several
    web processes each holds its own count.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()  # event loops of several threads (tests) share it

    def take(self, address: str) -> bool:
        """A slot for one more stream from ``address``; False at the cap."""
        with self._lock:
            if self.counts[address] >= settings.PLAYGROUND_VISITOR_STREAMS:
                return False
            self.counts[address] += 1
            return True

    def give_back(self, address: str) -> None:
        with self._lock:
            self.counts[address] -= 1
            if self.counts[address] <= 0:
                del self.counts[address]

    async def held(self, address: str, chunks: AsyncGenerator[str]) -> AsyncGenerator[str]:
        """``chunks``, holding the slot ``take`` gave ``address`` until they are done
        with; started here, so that even closing it unread gives the slot back."""
        stream = self._holding(address, chunks)
        await anext(stream)
        return stream

    async def _holding(self, address: str, chunks: AsyncGenerator[str]) -> AsyncGenerator[str]:
        try:
            yield ""  # where ``held`` leaves it: from here on, the finally runs
            async for chunk in chunks:
                yield chunk
        finally:
            try:
                await chunks.aclose()  # its own cleanup now, not at collection
            finally:
                self.give_back(address)


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


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def run_events_open(*, run_id: str, resume: str | None, address: str) -> EventsReply:
    """Open ``run_id``'s event stream for the viewer at ``address`` (``visitor_address``),
    after the position ``resume`` names (``Last-Event-ID``); 400, 404 or 429 otherwise."""
    after = last_event_id(resume)
    if after is None:
        return EventsReply(400, "Last-Event-ID must be a token position (an integer).")
    if not _is_uuid(run_id):
        return EventsReply(404, f"No run with id {run_id}.")
    if not open_streams.take(address):
        return EventsReply(
            429,
            "Too many open event streams from your address: at most "
            f"{settings.PLAYGROUND_VISITOR_STREAMS} (PLAYGROUND_VISITOR_STREAMS). "
            "Close one and retry.",
        )
    chunks = None
    try:
        # the run and its first stored events in one read (one connection)
        run, stored = await pooled(selectors.run_progress)(run_id=run_id, after=after, limit=PAGE)
        if run is None:
            return EventsReply(404, f"No run with id {run_id}.")
        stream = run_event_stream(run=run, after=after, stored=stored)
        chunks = await open_streams.held(address, stream)
    finally:
        if chunks is None:
            open_streams.give_back(address)
    return EventsReply(200, chunks=chunks)


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


def run_payload(run: Run) -> dict:
    return dict(RunSerializer(run).data)


class _Relay:
    """One viewer's position in the run."""

    def __init__(self, run: Run, after: int, stored: list[dict] | None = None) -> None:
        self.run, self.after = run, after
        self.read = stored  # the stored events after ``after``, read with ``run``

    def tokens(self, events: list[dict]) -> str:
        """The SSE text of the events past this viewer (never one twice)."""
        chunks = []
        for event in events:
            if event["position"] > self.after:
                chunks.append(sse("token", event, id=event["position"]))
                self.after = event["position"]
        return "".join(chunks)

    async def stored(self) -> AsyncIterator[str]:
        """The stored events past this viewer, a page per read (and per chunk); then
        ``run``, as read with the last page, says whether the run has finished and all
        its tokens were sent, since a run is marked finished after its last token."""
        while True:
            if self.read is not None:  # read already, with the run as it was then
                run, rows, self.read = self.run, self.read, None
            else:
                run, rows = await pooled(selectors.run_progress)(
                    run_id=self.run.id, after=self.after, limit=PAGE
                )
            self.run, complete = run or self.run, len(rows) < PAGE
            chunk = self.tokens(rows)
            del rows  # one page at a time: these events are text now
            if chunk:
                yield chunk
            if complete:
                return

    def end(self) -> str:
        event, data = services.run_end_event(self.run)
        return sse(event, data)


async def run_event_stream(
    *, run: Run, after: int = -1, stored: list[dict] | None = None
) -> AsyncGenerator[str]:
    """The SSE text of ``run`` after position ``after`` until its ``done``/``error``;
    ``stored``: its stored events after ``after``, when read with ``run``
    (``selectors.run_progress``), so the stream does not read them again."""
    relay = _Relay(run, after, stored)
    del stored  # the relay's to send, and to let go of once sent
    yield sse("run", run_payload(run))
    async for chunk in relay.stored():
        yield chunk
    if relay.run.finished:
        yield relay.end()
        return
    async for chunk in _live(relay):
        yield chunk


async def _live(relay: _Relay) -> AsyncIterator[str]:
    """Live events from the run's feed: its Redis stream in the full stack, the database
    in the embedded mode and whenever Redis cannot be reached."""
    from redis.exceptions import RedisError

    run_id = relay.run.id
    if streams.publishing():
        try:
            pull = _redis_pull(run_id, await streams.reading_client())
            async for chunk in _from_feed(relay, streams.stream_key(run_id), pull):
                yield chunk
            return
        except RedisError:
            logger.warning("run %s: Redis unreachable, polling the database", run_id)
    async for chunk in _from_feed(relay, f"database:{run_id}", _database_pull(run_id)):
        yield chunk


async def _from_feed(relay: _Relay, key: str, pull: feeds.Pull) -> AsyncIterator[str]:
    """The viewer's side of the run's shared feed: the entries after its position, a
    ping after each quiet heartbeat, until the end entry."""
    async with feeds.watching(key, streams.after_position_id(relay.after), pull) as feed:
        while True:
            last = streams.after_position_id(relay.after)
            entries = await feed.read(last, settings.PLAYGROUND_SSE_HEARTBEAT_S)
            if not entries:
                yield ": ping\n\n"
                continue
            if _skips(last, entries[0][0]):  # this viewer is behind the feed's start
                async for chunk in relay.stored():
                    yield chunk
            chunks: list[str] = []
            for _entry_id, fields in entries:
                kind, data = fields[b"event"].decode(), json.loads(fields[b"data"])
                if kind != "token":
                    yield "".join(chunks) + sse(kind, data)
                    return
                chunks.append(relay.tokens([data]))
            yield "".join(chunks)


def _skips(last: str | bytes, entry_id: bytes) -> bool:
    """Whether the entry ``entry_id`` leaves out positions after the entry ``last`` (a
    token entry should be the next position, an end entry follow the last one)."""
    (last_ms, _), (ms, seq) = feeds.entry_order(last), feeds.entry_order(entry_id)
    return ms > last_ms + (1 if seq == 0 else 0)


def _gapless(last: str, entries: list[feeds.Entry]) -> bool:
    """Whether ``entries`` follow the entry ``last`` and each other without a gap."""
    previous: str | bytes = last
    for entry_id, _ in entries:
        if _skips(previous, entry_id):
            return False
        previous = entry_id
    return True


def _redis_pull(run_id: uuid.UUID, client) -> feeds.Pull:
    """The feed's reads of the run's Redis stream, each blocking for less than the
    client's socket timeout; the database instead when the stream skips positions (a
    publish that failed), and after each quiet heartbeat (a run whose end was never
    published, a stale run)."""
    read = feeds.redis_pull(client, streams.stream_key(run_id), streams.read_block_ms())
    looked = time.monotonic()

    async def pull(last: str) -> list[feeds.Entry]:
        nonlocal looked
        entries = await read(last)
        quiet = time.monotonic() - looked >= settings.PLAYGROUND_SSE_HEARTBEAT_S
        if entries and _gapless(last, entries):
            looked = time.monotonic()
            return entries
        if not entries and not quiet:
            return []
        looked = time.monotonic()
        stored = await _look(run_id, last)
        if entries and not stored:  # positions missing from the database as well (down)
            await asyncio.sleep(POLL_MAX_S)
        return stored

    return pull


def _database_pull(run_id: uuid.UUID) -> feeds.Pull:
    """The feed's reads of the run in the database: again after ``POLL_MIN_S`` while
    events come, backing off (doubling) to ``POLL_MAX_S`` while none do."""
    pause = POLL_MIN_S

    async def pull(last: str) -> list[feeds.Entry]:
        nonlocal pause
        if entries := await _look(run_id, last):
            pause = POLL_MIN_S
            return entries
        await asyncio.sleep(pause)
        pause = min(pause * 2, POLL_MAX_S)
        return []

    return pull


async def _look(run_id: uuid.UUID, last: str) -> list[feeds.Entry]:
    """``_stored_entries``; none while the database is unreachable (its viewers wait)."""
    try:
        return await pooled(_stored_entries)(run_id=run_id, last=last)
    except DATABASE_ERRORS as exc:
        logger.warning("run %s: database unreachable (%s), stream waits", run_id, exc)
        return []


def _stored_entries(*, run_id: uuid.UUID, last: str) -> list[feeds.Entry]:
    """The run's stored events after the entry ``last`` (a page), as feed entries, then
    its end entry once it has finished; a stale run is failed (its end follows)."""
    after = feeds.entry_order(last)[0] - 1
    run, rows = selectors.run_progress(run_id=run_id, after=after, limit=PAGE)
    entries = [
        (streams.token_entry_id(row["position"]).encode(), _fields("token", row)) for row in rows
    ]
    if run is None or len(rows) == PAGE:
        return entries
    if run.finished:
        last_position = rows[-1]["position"] if rows else after
        event, data = services.run_end_event(run)
        entries.append((streams.end_entry_id(last_position).encode(), _fields(event, data)))
    elif not rows and selectors.run_is_stale(run=run):
        services.run_fail_stale()
    return entries


def _fields(event: str, data: object) -> dict[bytes, bytes]:
    """An entry's fields, as the worker publishes them (``playground.streams``)."""
    return {b"event": event.encode(), b"data": json.dumps(data, cls=DjangoJSONEncoder).encode()}
