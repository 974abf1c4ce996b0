"""Event streams stay bounded under a crowd or a hostile visitor (issue 30, item 3): the
per-address cap under a burst of opens, the shared Redis read on a quiet run, the shared
database poll, paged replays, and the HTTPS rules of the event-stream front."""

import asyncio
import gc
import hashlib
import json
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.db.backends.signals import connection_created
from django.test import AsyncClient
from django.utils import timezone

from playground import streams
from playground.events import open_streams, pooled, run_events_open
from playground.models import Run, RunToken
from tests.playground.conftest import make_event
from tests.playground.stack import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def embedded(settings):
    settings.REDIS_URL = ""
    settings.PLAYGROUND_SSE_HEARTBEAT_S = 10
    settings.PLAYGROUND_VISITOR_STREAMS = 20


def parse(text: str) -> list[dict]:
    return list(parse_sse(iter(text.split("\n"))))


async def drain(chunks) -> str:
    return "".join([chunk async for chunk in chunks])


# -- the per-address cap


def test_300_streams_opened_at_once_from_one_address_hold_the_cap(run_factory):
    # given a run, and 10 threads of 30 viewers each, all from one address
    run = run_factory(tokens=3, status="done", stats={})
    threads, per_thread = 10, 30
    start, opened = threading.Barrier(threads), threading.Barrier(threads)

    async def burst() -> list[int]:
        await asyncio.to_thread(start.wait)
        replies = await asyncio.gather(
            *(
                run_events_open(run_id=str(run.id), resume=None, address="address:192.0.2.7")
                for _ in range(per_thread)
            )
        )
        await asyncio.to_thread(opened.wait)  # every stream open before any closes
        for reply in replies:
            if reply.chunks is not None:
                await reply.chunks.aclose()
        return [reply.status for reply in replies]

    # when they all open a stream at once
    with ThreadPoolExecutor(threads) as pool:
        statuses = sum(pool.map(lambda _: asyncio.run(burst()), range(threads)), [])

    # then exactly the cap got a stream, and closing them gave every slot back
    assert statuses.count(200) == 20
    assert statuses.count(429) == threads * per_thread - 20
    assert not open_streams.counts


def test_a_stream_that_fails_or_is_dropped_unread_gives_its_slot_back(run_factory, settings):
    # given an address allowed one stream
    settings.PLAYGROUND_VISITOR_STREAMS = 1
    run = run_factory(tokens=1, status="done", stats={})
    address = "address:192.0.2.8"

    async def failing():
        yield "x"
        raise RuntimeError("the stream broke")

    async def scenario() -> list[int]:
        statuses = []
        assert open_streams.take(address)
        broken = await open_streams.held(address, failing())
        with pytest.raises(RuntimeError):
            await drain(broken)
        reply = await run_events_open(run_id=str(run.id), resume=None, address=address)
        statuses.append(reply.status)
        del reply  # opened, never read nor closed
        gc.collect()
        await asyncio.sleep(0.05)  # asyncio closes the dropped stream
        missing = "00000000-0000-0000-0000-000000000000"
        for run_id in (missing, str(run.id)):
            reply = await run_events_open(run_id=run_id, resume=None, address=address)
            statuses.append(reply.status)
            if reply.chunks is not None:
                await drain(reply.chunks)
        return statuses

    # when
    statuses = asyncio.run(scenario())

    # then each stream after the broken one had the slot: the dropped one, after the 404
    assert statuses == [200, 404, 200]
    assert not open_streams.counts


# -- run ids that are not UUIDs

NOT_UUIDS = ["a" * 36, "-" * 36, "0" * 32 + "----", "A" * 8 + "-AAAA-AAAA-AAAA-" + "A" * 12]


@pytest.mark.parametrize("run_id", NOT_UUIDS)
def test_a_run_id_of_36_characters_that_is_no_uuid_is_a_404(run_id):
    # when
    front = call("front", f"/runs/{run_id}/events")
    django = asyncio.run(AsyncClient().get(f"/runs/{run_id}/events"))
    direct = asyncio.run(run_events_open(run_id=run_id, resume=None, address="address:x"))

    # then
    assert (front[0], django.status_code, direct.status) == (404, 404, 404)
    assert not open_streams.counts


# -- HTTPS: the front does what Django's SecurityMiddleware does

Headers = tuple[tuple[bytes, bytes], ...]


def call(app: str, path: str, *, scheme: str = "http", headers: Headers = ()):
    """Status, headers and body of the project's ASGI application (``app="front"``) or of
    Django's own handler (``"django"``, made now: it reads the settings once) for a GET."""
    from django.core.asgi import get_asgi_application

    from loopatlas.asgi import application

    handler = application if app == "front" else get_asgi_application()
    sent: list[dict] = []
    requested = False

    async def receive():
        nonlocal requested
        if not requested:  # the request (no body), then a client that stays
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "scheme": scheme,
        "path": path,
        "query_string": b"last_event_id=0",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }

    async def go():
        async with asyncio.timeout(20):
            await handler(scope, receive, send)

    asyncio.run(go())
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    named = {name.lower(): value for name, value in sent[0]["headers"]}
    return sent[0]["status"], named, body.decode()


FORWARDED_HTTPS = ((b"x-forwarded-proto", b"https"),)


@pytest.mark.parametrize(
    ("proxy", "scheme", "headers", "secure"),
    [
        (False, "http", (), False),
        (False, "https", (), True),
        (True, "http", FORWARDED_HTTPS, True),  # BEHIND_TLS_PROXY: TLS ended at the proxy
        (True, "http", (), False),
        (False, "http", FORWARDED_HTTPS, False),  # no proxy trusted: a made-up header
    ],
)
def test_the_event_stream_front_redirects_to_https_and_sends_hsts_as_django(
    run_factory, settings, proxy, scheme, headers, secure
):
    # given production's HTTPS settings
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = False
    if proxy:
        settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    run = run_factory(tokens=2, status="done", stats={})

    # when the front and Django alone answer the same request
    front = call("front", run.get_events_url(), scheme=scheme, headers=headers)
    django = call("django", run.get_events_url(), scheme=scheme, headers=headers)

    # then an insecure one goes to HTTPS, a secure one gets its stream and HSTS, as Django does
    if secure:
        assert front[0] == django[0] == 200
        hsts = front[1][b"strict-transport-security"]
        assert hsts == django[1][b"strict-transport-security"] == b"max-age=3600; includeSubDomains"
        assert [e.get("id") for e in parse(front[2])] == [None, "1", None]
    else:
        assert front[0] == django[0] == 301
        location = f"https://testserver{run.get_events_url()}?last_event_id=0".encode()
        assert front[1][b"location"] == django[1][b"location"] == location
        assert b"strict-transport-security" not in front[1]
    for name in (b"referrer-policy", b"x-content-type-options"):
        assert front[1][name] == django[1][name]


def test_without_https_settings_the_front_neither_redirects_nor_sends_hsts(run_factory):
    # given the test settings (no redirect, no HSTS)
    run = run_factory(tokens=1, status="done", stats={})

    # when
    status, headers, _ = call("front", run.get_events_url())

    # then
    assert status == 200 and b"strict-transport-security" not in headers


# -- live viewers of a quiet run: few database queries, and Redis kept


class Queries:
    """Counts the queries of every database connection opened while it counts (the
    stream's reads run on pooled threads, each on a connection of its own)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def _wrap(self, execute, sql, params, many, context):
        self.times.append(time.monotonic())
        return execute(sql, params, many, context)

    def _opened(self, sender, connection, **kwargs) -> None:
        if self._wrap not in connection.execute_wrappers:  # a thread's, connecting again
            connection.execute_wrappers.append(self._wrap)

    def __enter__(self) -> "Queries":
        connection_created.connect(self._opened)
        return self

    def __exit__(self, *exc: object) -> None:
        connection_created.disconnect(self._opened)
        for connection in connections.all(initialized_only=True):
            if self._wrap in connection.execute_wrappers:
                connection.execute_wrappers.remove(self._wrap)

    def between(self, start: float, end: float) -> int:
        return sum(start <= t < end for t in self.times)


def watch_quietly(
    run: Run, *, viewers: int, quiet_s: float, end: Callable[[], None]
) -> tuple[list[list[dict]], Queries, float]:
    """``viewers`` viewers (each from an address of its own) of ``run`` while it stays
    quiet for ``quiet_s`` after each has had its replay, then ``end()`` ends it: what
    each saw, the queries made, and when the quiet time began."""

    async def scenario() -> tuple[list[list[dict]], float]:
        replayed = asyncio.Semaphore(0)

        async def viewer(n: int) -> list[dict]:
            reply = await run_events_open(
                run_id=str(run.id), resume=None, address=f"address:10.0.{n // 250}.{n % 250}"
            )
            assert reply.chunks is not None
            chunks = [await anext(reply.chunks) for _ in range(2)]  # the run, its replay
            replayed.release()
            return parse("".join(chunks) + await drain(reply.chunks))

        watching = [asyncio.ensure_future(viewer(n)) for n in range(viewers)]
        async with asyncio.timeout(20):
            for _ in range(viewers):
                await replayed.acquire()
        settled = time.monotonic()
        await asyncio.sleep(quiet_s)
        await pooled(end)()
        async with asyncio.timeout(20):
            return await asyncio.gather(*watching), settled

    with Queries() as queries:
        seen, settled = asyncio.run(scenario())
    return seen, queries, settled


def test_a_quiet_run_with_100_viewers_costs_the_database_a_few_queries_a_second(run_factory):
    # given a running run with two tokens stored, then nothing for a while (embedded mode:
    # the viewers' live events come from the database)
    run = run_factory(tokens=2, status="running", heartbeat_at=timezone.now())

    def end() -> None:
        Run.objects.filter(pk=run.pk).update(status="done", stats={})

    # when 100 viewers watch it for 3 quiet seconds
    seen, queries, settled = watch_quietly(run, viewers=100, quiet_s=3.0, end=end)

    # then every viewer saw the run to its end, and while it was quiet the database saw at
    # most a few queries a second (one poll for all, backing off), not one per viewer
    events_seen = [[e.get("id") or e.get("event") for e in view] for view in seen]
    assert events_seen == [["run", "0", "1", "done"]] * 100
    assert queries.between(settled, settled + 3.0) <= 3 * 3


@pytest.mark.services
def test_a_quiet_run_watched_through_redis_costs_the_database_a_query_a_heartbeat(
    stream, run_factory, settings
):
    # given a running run published to its Redis stream, then quiet
    settings.PLAYGROUND_SSE_HEARTBEAT_S = 1.0
    run = run_factory(tokens=2, status="running", heartbeat_at=timezone.now())
    streams.publish_tokens(run_id=run.id, events=[make_event(p) for p in range(2)])

    def end() -> None:
        Run.objects.filter(pk=run.pk).update(status="done", stats={})
        streams.publish_end(run_id=run.id, last_position=1, event="done", data={"status": "done"})

    # when 100 viewers watch it for 3 quiet seconds
    seen, queries, settled = watch_quietly(run, viewers=100, quiet_s=3.0, end=end)

    # then each saw it end, and the database was looked at once a heartbeat for them all
    assert [[e.get("event") for e in view if "event" in e][-1] for view in seen] == ["done"] * 100
    assert queries.between(settled, settled + 3.0) <= 3 * 3


def test_the_viewers_client_blocks_for_less_than_its_socket_timeout(settings):
    # given the full stack's settings
    settings.REDIS_URL = "redis://127.0.0.1:6379/13"

    async def client_timeout() -> float:
        client = await streams.reading_client()
        try:
            return client.connection_pool.connection_kwargs["socket_timeout"]
        finally:
            await client.aclose()

    # then the shared read asks Redis to answer well before the socket gives up
    assert asyncio.run(client_timeout()) == streams.READ_TIMEOUT_S
    assert streams.read_block_ms() <= streams.READ_TIMEOUT_S * 1000 / 2


@pytest.mark.services
def test_a_quiet_runs_viewers_stay_on_redis_past_the_socket_timeout(
    stream, run_factory, settings, monkeypatch, caplog
):
    # given a client that gives up on a socket read after 0.6 s, and a heartbeat longer
    # than that (as production's 10 s heartbeat is longer than redis-py's 5 s default)
    monkeypatch.setattr(streams, "READ_TIMEOUT_S", 0.6)
    settings.PLAYGROUND_SSE_HEARTBEAT_S = 1.0
    run = run_factory(status="running", heartbeat_at=timezone.now())

    def end() -> None:
        streams.publish_tokens(run_id=run.id, events=[make_event(0)])
        streams.publish_end(run_id=run.id, last_position=0, event="done", data={"status": "done"})

    # when 20 viewers watch it quiet for 2.5 s, then it publishes a token and its end
    with caplog.at_level("WARNING", logger="playground.events"):
        seen, _, _ = watch_quietly(run, viewers=20, quiet_s=2.5, end=end)

    # then none fell back to the database: each got the token and the end from Redis,
    # and (the database still saying "running", no token stored) only Redis had them
    assert "Redis unreachable" not in caplog.text
    assert [[e.get("event") for e in view if "event" in e] for view in seen] == [
        ["run", "token", "done"]
    ] * 20


# -- a replay is read in pages


def max_event(position: int) -> dict:
    """A token event as large as the bounds allow: the lens at its widest (top_k 20) on
    every one of 8 loops (twice a trained 4)."""
    event = make_event(position, exit_loop=8)
    for loop in event["loops"]:
        loop["top"] = [[1000 + k, f"t{k}", 0.0123] for k in range(20)]
        loop["kl"] = 0.0123
    return event


@pytest.mark.slow  # allocations traced: about 10 s
def test_a_maximum_size_replay_is_streamed_in_pages_within_a_memory_bound(run_factory):
    # given a finished run of 2,256 positions (a 2,000-token prompt and 256 new tokens)
    # whose stream is about 9.8 MiB of text (as Python objects, a page of it is 15 times
    # that: the whole run read at once took 63 MiB)
    run = run_factory(status="done", stats={"tokens_per_s": 1.0})
    positions = 2256
    RunToken.objects.bulk_create(RunToken.from_event(run, max_event(p)) for p in range(positions))
    expected = hashlib.sha256()  # the stream as SSE text, written out independently
    stored = RunToken.objects.filter(run=run).order_by("position").values_list("data", flat=True)
    for p, event in enumerate(stored.iterator()):  # as read back (jsonb orders the keys)
        expected.update(f"id: {p}\nevent: token\ndata: {json.dumps(event)}\n\n".encode())
    end = {"status": "done", "stats": {"tokens_per_s": 1.0}, "error": ""}
    expected.update(f"event: done\ndata: {json.dumps(end)}\n\n".encode())

    async def replay() -> tuple[bytes, int, int]:
        received = hashlib.sha256()
        reply = await run_events_open(run_id=str(run.id), resume=None, address="address:x")
        assert reply.chunks is not None
        size = 0
        async for chunk in reply.chunks:
            if chunk.startswith("event: run\n"):
                continue
            received.update(chunk.encode())
            size += len(chunk)
        return received.digest(), size, tracemalloc.get_traced_memory()[1]

    # when a viewer replays it, the process's allocations traced
    gc.collect()
    tracemalloc.start()
    try:
        digest, size, peak = asyncio.run(replay())
    finally:
        tracemalloc.stop()

    # then it got every event as the stream has always sent them, and the process never
    # held more than a small part of the run at once
    assert digest == expected.digest()
    assert size > 7.5 * 2**20
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"
