"""The SSE stream of a run, read in-process. Its database reads run in the shared thread
pool, on connections of their own, so these tests commit what they write; each stream is
read on an event loop in a thread of its own (the browser tests keep one in this one)."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import cast

import pytest
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.utils import timezone

from playground import services, streams
from playground.events import open_streams, pooled, run_event_stream, run_events_open
from playground.models import Run, RunToken
from tests.playground.conftest import make_event
from tests.playground.stack import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def embedded(settings):
    settings.REDIS_URL = ""
    settings.PLAYGROUND_SSE_HEARTBEAT_S = 10


def run_async(coroutine):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def parse(chunks: list[str]) -> list[dict]:
    return list(parse_sse(iter("".join(chunks).split("\n"))))


def read(run: Run, after: int = -1, *, stop=None, during=None) -> list[dict]:
    """The stream's events until it closes (or ``stop(event)`` says so), while the
    coroutine ``during`` runs beside it (a worker writing, say)."""

    async def go() -> list[str]:
        side = asyncio.ensure_future(during()) if during else None
        chunks = []
        async with asyncio.timeout(20):
            async for chunk in run_event_stream(run=run, after=after):
                chunks.append(chunk)
                if stop and any(stop(event) for event in parse([chunk])):
                    break
        if side:
            await side
        return chunks

    return parse(run_async(go()))


def store(run: Run, position: int, phase: str = "generated") -> None:
    RunToken.from_event(run, make_event(position, phase)).save()


def test_opening_a_stream_connects_to_the_database_once(run_factory, settings):
    from django.db.backends.signals import connection_created

    if not settings.USING_POSTGRES:
        pytest.skip("connections counted: PostgreSQL (SQLite's test database is one, shared)")

    # given a finished run
    run = run_factory(tokens=3, status="done", stats={})
    opened: list[str] = []

    def count(sender, connection, **kwargs) -> None:
        opened.append(connection.alias)

    async def view() -> list[str]:
        reply = await run_events_open(run_id=str(run.id), resume=None, address="192.0.2.1")
        assert reply.chunks is not None
        return [chunk async for chunk in reply.chunks]

    # when a viewer opens its stream and reads it to the end
    connection_created.connect(count)
    try:
        events = parse(run_async(view()))
    finally:
        connection_created.disconnect(count)
    # then it got every event, and the run and its events came in one read
    assert [e.get("id") for e in events] == [None, "0", "1", "2", None]
    assert opened == ["default"]


def test_a_finished_run_replays_from_the_store(run_factory):
    # given
    run = run_factory(tokens=4, prompt_tokens=2, status="done", stats={"tokens_per_s": 9.5})

    # when
    events = read(run)

    # then
    assert [e["event"] for e in events] == ["run", "token", "token", "token", "token", "done"]
    assert events[0]["data"]["id"] == str(run.id) and events[0]["data"]["trained_loops"] == 4
    assert [e["id"] for e in events[1:5]] == ["0", "1", "2", "3"]
    assert events[1]["data"] == make_event(0, "prompt")
    assert events[-1]["data"] == {"status": "done", "stats": {"tokens_per_s": 9.5}, "error": ""}


def test_resuming_sends_only_the_positions_after_the_last_event_id(run_factory):
    # given
    run = run_factory(tokens=6, status="done")

    # when
    events = read(run, after=3)

    # then
    assert [e.get("id") for e in events] == [None, "4", "5", None]


def test_a_failed_run_ends_with_an_error_event(run_factory):
    # given
    run = run_factory(tokens=1, status="failed", error="its worker was lost")

    # when
    events = read(run)

    # then
    assert events[-1] == {
        "event": "error",
        "data": {"status": "failed", "error": "its worker was lost"},
    }


def test_a_live_viewer_gets_each_token_once_in_order(run_factory):
    # given: a running run, its worker storing tokens while the viewer waits
    run = run_factory(status="running", heartbeat_at=timezone.now())

    async def worker():
        for position in range(6):
            await asyncio.sleep(0.05)
            await pooled(store)(run, position)
        await pooled(Run.objects.filter(pk=run.pk).update)(status="done")

    # when
    events = read(run, during=worker)

    # then
    assert [e.get("id") for e in events if e.get("event") == "token"] == list("012345")
    assert events[-1]["event"] == "done"


def test_a_quiet_stream_sends_heartbeats(run_factory, settings):
    # given
    settings.PLAYGROUND_SSE_HEARTBEAT_S = 0.05
    run = run_factory(status="queued")

    # when
    events = read(run, stop=lambda event: "comment" in event)

    # then
    assert events[-1] == {"comment": "ping"}


def test_a_run_whose_worker_stopped_responding_ends_failed(run_factory, settings):
    # given
    stale = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    run = run_factory(tokens=2, status="running", heartbeat_at=stale, worker="w@gpu1")

    # when
    events = read(run)

    # then
    assert [e.get("id") for e in events[1:3]] == ["0", "1"]
    assert events[-1]["event"] == "error"
    assert "stopped responding" in events[-1]["data"]["error"]
    assert "w@gpu1" not in events[-1]["data"]["error"]  # the host name is in the log only


# -- the view


def get(path: str, **headers):
    async def go():
        response = await AsyncClient().get(path, headers=headers)
        if not response.streaming:
            return response, ""
        body = [chunk async for chunk in cast(StreamingHttpResponse, response)]
        return response, b"".join(c if isinstance(c, bytes) else c.encode() for c in body)

    return run_async(go())


def test_the_view_streams_server_sent_events(run_factory):
    # given
    run = run_factory(tokens=3, status="done")

    # when
    response, body = get(run.get_events_url(), **{"Last-Event-ID": "1"})

    # then
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert [e.get("id") for e in parse([body.decode()])] == [None, "2", None]


def test_the_view_takes_the_resume_point_from_the_query_too(run_factory):
    # given
    run = run_factory(tokens=3, status="done")

    # when
    _, body = get(f"{run.get_events_url()}?last_event_id=0")

    # then
    assert [e.get("id") for e in parse([body.decode()])] == [None, "1", "2", None]


def test_a_malformed_last_event_id_is_a_400(run_factory):
    # when
    response, _ = get(run_factory().get_events_url(), **{"Last-Event-ID": "x"})

    # then
    assert response.status_code == 400


def test_an_unknown_run_is_a_404(db):
    # when
    response, _ = get("/runs/00000000-0000-0000-0000-000000000000/events")

    # then
    assert response.status_code == 404


def test_an_address_over_its_open_streams_gets_429_until_one_closes(run_factory, settings):
    # given: an address already holding its two streams (counted as they are read)
    settings.PLAYGROUND_VISITOR_STREAMS = 2
    run = run_factory(tokens=3, status="done")
    address = "address:127.0.0.1"

    async def chunks():
        yield "x"
        await asyncio.sleep(30)

    async def go():
        held = []
        for _ in range(2):
            assert open_streams.take(address)
            held.append(await open_streams.held(address, chunks()))
        refused = await AsyncClient().get(run.get_events_url())
        other = open_streams.take("address:10.1.1.1")
        open_streams.give_back("address:10.1.1.1")
        await held[0].aclose()  # a viewer goes away
        allowed = await AsyncClient().get(run.get_events_url())
        await held[1].aclose()
        return refused, other, allowed

    # when
    refused, other, allowed = run_async(go())

    # then
    assert refused.status_code == 429
    assert "PLAYGROUND_VISITOR_STREAMS" in refused.content.decode()
    assert other is True and allowed.status_code == 200
    assert not open_streams.counts


def test_no_middleware_puts_the_stream_on_a_thread(settings):
    """One sync-only middleware makes Django adapt the chain around it with
    ``sync_to_async``: every request, each open stream included, then holds a thread."""
    from django.utils.module_loading import import_string

    # then
    sync_only = [
        path
        for path in settings.MIDDLEWARE
        if not getattr(import_string(path), "async_capable", False)
    ]
    assert sync_only == []


# -- the same stream served in front of Django (playground.asgi)


def asgi_get(
    path: str,
    *,
    disconnect_after: float | None = None,
    query: bytes = b"",
    host: bytes = b"testserver",
):
    """Call the project's ASGI application; returns the status and the body sent."""
    from loopatlas.asgi import application

    sent: list[dict] = []

    async def receive():
        if disconnect_after is None:
            await asyncio.sleep(3600)
        else:
            await asyncio.sleep(disconnect_after)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query,
        "headers": [(b"host", host)],
        "client": ("127.0.0.1", 5000),
    }

    async def go():
        async with asyncio.timeout(20):
            await application(scope, receive, send)

    run_async(go())
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], dict(sent[0]["headers"]), body.decode()


def test_the_asgi_front_streams_a_run_without_entering_django(run_factory):
    # given
    run = run_factory(tokens=3, status="done")

    # when
    status, headers, body = asgi_get(run.get_events_url(), query=b"last_event_id=0")
    missing = asgi_get("/runs/00000000-0000-0000-0000-000000000000/events")
    malformed = asgi_get(run.get_events_url(), query=b"last_event_id=x")

    # then
    assert (status, headers[b"content-type"]) == (200, b"text/event-stream")
    assert [e.get("id") for e in parse([body])] == [None, "1", "2", None]
    assert (missing[0], malformed[0]) == (404, 400)


def test_the_asgi_front_refuses_a_host_django_would_refuse(run_factory):
    # given a run, and Host headers outside ALLOWED_HOSTS
    run = run_factory(tokens=3, status="done")

    # when
    forged = asgi_get(run.get_events_url(), host=b"evil.example")
    empty = asgi_get(run.get_events_url(), host=b"")
    allowed = asgi_get(run.get_events_url(), host=b"testserver:8000")

    # then
    assert (forged[0], forged[2]) == (400, "Invalid Host header.")
    assert (empty[0], allowed[0]) == (400, 200)


def test_a_viewer_going_away_closes_its_stream_and_is_counted_off(run_factory):
    # given a run that is still going (nothing more will come)
    run = run_factory(tokens=2, status="running", heartbeat_at=timezone.now())

    # when the viewer disconnects after a moment
    status, _, body = asgi_get(run.get_events_url(), disconnect_after=0.5)

    # then the relay stopped there, and the address holds no stream
    assert status == 200
    assert [e.get("event") for e in parse([body])] == ["run", "token", "token"]
    assert not open_streams.counts


# -- the full stack's Redis stream


@pytest.mark.services
def test_live_events_come_from_the_redis_stream_after_the_stored_ones(stream, run_factory):
    # given: positions 0-2 stored and published, the rest still to come
    run = run_factory(tokens=3, status="running", heartbeat_at=timezone.now())
    streams.publish_tokens(run_id=run.id, events=[make_event(p) for p in range(3)])

    async def worker():
        await asyncio.sleep(0.1)
        for position in range(3, 6):
            await pooled(store)(run, position)
            streams.publish_tokens(run_id=run.id, events=[make_event(position)])
        await pooled(Run.objects.filter(pk=run.pk).update)(status="done", stats={"x": 1})
        await pooled(services.run_end_publish)(await pooled(Run.objects.get)(pk=run.pk))

    # when
    events = read(run, during=worker)

    # then
    assert [e.get("id") for e in events if e.get("event") == "token"] == list("012345")
    assert events[-1] == {
        "event": "done",
        "data": {"status": "done", "stats": {"x": 1}, "error": ""},
    }


@pytest.mark.services
def test_viewers_share_the_loops_redis_connections(stream, run_factory):
    # given three live runs whose events are all in their streams
    runs = [run_factory(status="running", heartbeat_at=timezone.now()) for _ in range(3)]
    for run in runs:
        streams.publish_tokens(run_id=run.id, events=[make_event(p) for p in range(2)])
        end = {"status": "done", "stats": {}}
        streams.publish_end(run_id=run.id, last_position=1, event="done", data=end)

    def received() -> int:  # connections Redis has accepted so far
        return stream.info("stats")["total_connections_received"]

    async def view_each() -> list[list[str]]:
        return [[chunk async for chunk in run_event_stream(run=run)] for run in runs]

    # when one viewer after another watches them, on one event loop
    before = received()
    seen = run_async(view_each())
    # then each saw its run to the end, and one connection was opened for them all
    assert [[e.get("id") for e in parse(chunks)][1:] for chunks in seen] == [["0", "1", None]] * 3
    assert all(parse(chunks)[-1]["event"] == "done" for chunks in seen)
    assert received() - before == 1


@pytest.mark.services
def test_a_crowd_watching_a_run_costs_one_redis_connection(stream, run_factory, caplog):
    # given a live run, and more viewers on one event loop than redis-py's asyncio pool
    # holds by default (100)
    run = run_factory(status="running", heartbeat_at=timezone.now())
    viewers = 120
    before = stream.info("stats")["total_connections_received"]

    async def watch_all() -> list[list[str]]:
        async def one() -> list[str]:
            return [chunk async for chunk in run_event_stream(run=run)]

        watching = [asyncio.ensure_future(one()) for _ in range(viewers)]
        await asyncio.sleep(1.0)  # every viewer blocked on the stream
        streams.publish_tokens(run_id=run.id, events=[make_event(0)])
        end = {"status": "done", "stats": {}}
        streams.publish_end(run_id=run.id, last_position=0, event="done", data=end)
        return await asyncio.gather(*watching)

    # when
    with caplog.at_level("WARNING", logger="playground.events"):
        seen = run_async(watch_all())

    # then every viewer got the event from Redis (none fell back to polling the database),
    # through one shared read of the stream (the other connection is this test's publisher)
    assert [[e.get("event") for e in parse(chunks)] for chunks in seen] == [
        ["run", "token", "done"]
    ] * viewers
    assert "polling the database" not in caplog.text
    assert stream.info("stats")["total_connections_received"] - before == 2


@pytest.mark.services
def test_the_stream_entries_are_keyed_by_position(stream, run_factory):
    # given
    run = run_factory()
    client = stream

    # when: an event published twice (a replay) and the end
    streams.publish_tokens(run_id=run.id, events=[make_event(0), make_event(1)])
    streams.publish_tokens(run_id=run.id, events=[make_event(1)])
    streams.publish_end(run_id=run.id, last_position=1, event="done", data={"status": "done"})

    # then
    entries = cast(
        list[tuple[bytes, dict[bytes, bytes]]], client.xrange(streams.stream_key(run.id))
    )
    assert [entry_id for entry_id, _ in entries] == [b"1-0", b"2-0", b"2-1"]
    assert json.loads(entries[1][1][b"data"])["position"] == 1
    assert 0 < client.ttl(streams.stream_key(run.id)) <= 3600


@pytest.mark.services
def test_tokens_stored_but_never_published_are_not_lost(stream, run_factory):
    # given: the worker stored position 2 and died before publishing it; the sweep ended it
    run = run_factory(tokens=3, status="running", heartbeat_at=timezone.now())
    streams.publish_tokens(run_id=run.id, events=[make_event(0), make_event(1)])

    async def sweep():
        await asyncio.sleep(0.1)
        await pooled(services.run_fail)(run_id=run.id, reason="lost")

    # when: a viewer that had position 0 already
    events = read(run, after=0, during=sweep)

    # then
    assert [e.get("id") for e in events if e.get("event") == "token"] == ["1", "2"]
    assert events[-1] == {"event": "error", "data": {"status": "failed", "error": "lost"}}


@pytest.mark.services
def test_a_position_missing_from_the_stream_is_read_from_the_store(stream, run_factory):
    # given: the viewer has what was stored; then position 2's publish is lost
    run = run_factory(tokens=2, status="running", heartbeat_at=timezone.now())

    async def worker():
        await asyncio.sleep(0.2)
        await pooled(store)(run, 2)
        await pooled(store)(run, 3)
        streams.publish_tokens(run_id=run.id, events=[make_event(3)])
        await pooled(Run.objects.filter(pk=run.pk).update)(status="done")
        await pooled(services.run_end_publish)(await pooled(Run.objects.get)(pk=run.pk))

    # when
    events = read(run, during=worker)

    # then
    assert [e.get("id") for e in events if e.get("event") == "token"] == list("0123")
    assert events[-1]["event"] == "done"


UNREACHABLE = "redis://127.0.0.1:1/0"


def test_viewers_poll_the_database_when_redis_is_unreachable(run_factory, settings):
    # given
    settings.REDIS_URL = UNREACHABLE
    streams.stream_reset_client()
    run = run_factory(tokens=1, status="running", heartbeat_at=timezone.now())

    async def worker():
        await asyncio.sleep(0.2)
        await pooled(store)(run, 1)
        await pooled(Run.objects.filter(pk=run.pk).update)(status="done")

    # when
    events = read(run, during=worker)

    # then
    assert [e.get("id") for e in events if e.get("event") == "token"] == ["0", "1"]
    assert events[-1]["event"] == "done"


def test_publishing_to_an_unreachable_redis_is_not_an_error(settings, run_factory):
    # given
    settings.REDIS_URL = UNREACHABLE
    streams.stream_reset_client()
    run = run_factory()

    # when
    streams.publish_tokens(run_id=run.id, events=[make_event(0)])
    streams.publish_end(run_id=run.id, last_position=0, event="done", data={})

    # then: nothing raised
    streams.stream_reset_client()
