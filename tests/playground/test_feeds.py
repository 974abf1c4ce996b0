"""One shared read of a live run's Redis stream per event loop (playground.feeds)."""

import asyncio
import json

import pytest
import redis
import redis.asyncio as aioredis

from playground import feeds, streams

KEY = streams.stream_key("feed-test")
UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def sync(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()


def publish(client, positions, end=False):
    for p in positions:
        data = json.dumps({"position": p})
        client.xadd(KEY, {"event": "token", "data": data}, id=streams.token_entry_id(p))
    if end:
        last = positions[-1] if positions else -1
        client.xadd(KEY, {"event": "done", "data": "{}"}, id=streams.end_entry_id(last))


async def collect(client, start: str, ready: asyncio.Event | None = None) -> list[bytes]:
    """A viewer: the entry ids after ``start`` until the end entry."""
    seen: list[bytes] = []
    async with feeds.watching(KEY, start, feeds.redis_pull(client, KEY, block_ms=200)) as feed:
        if ready is not None:
            ready.set()
        while not seen or not seen[-1].endswith(b"-1"):
            after = seen[-1].decode() if seen else start
            seen += [entry_id for entry_id, _ in await feed.read(after, timeout_s=5)]
    return seen


@pytest.mark.services
def test_the_viewers_of_a_run_share_one_read_of_its_stream(sync, redis_url):
    # given 30 viewers of one live run on one event loop, waiting for its next entries
    publish(sync, [0, 1])
    before = sync.info("stats")["total_connections_received"]

    async def crowd() -> list[list[bytes]]:
        client = aioredis.Redis.from_url(redis_url)
        viewers = [asyncio.ensure_future(collect(client, "2-0")) for _ in range(30)]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(publish, sync, [2, 3], True)
        try:
            return await asyncio.gather(*viewers)
        finally:
            await client.aclose()

    # when
    seen = asyncio.run(crowd())

    # then each saw the entries after its position, and Redis saw one connection for all
    assert seen == [[b"3-0", b"4-0", b"4-1"]] * 30
    assert sync.info("stats")["total_connections_received"] - before == 1


@pytest.mark.services
def test_a_viewer_gets_the_entries_after_its_own_position(sync, redis_url):
    # given a viewer from the start of a run that has published positions 0-3
    publish(sync, [0, 1, 2, 3])

    async def two() -> tuple[list[bytes], list[bytes]]:
        client = aioredis.Redis.from_url(redis_url)
        ready = asyncio.Event()
        first = asyncio.ensure_future(collect(client, "0-0", ready))
        await ready.wait()
        await asyncio.sleep(0.3)  # it has read 0-3 and waits
        # when a second viewer that has everything up to position 2 joins the same feed
        second = asyncio.ensure_future(collect(client, streams.after_position_id(2)))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(publish, sync, [4], True)
        try:
            return await first, await second
        finally:
            await client.aclose()

    first, second = asyncio.run(two())

    # then each got what follows its own position, in order
    assert first == [b"1-0", b"2-0", b"3-0", b"4-0", b"5-0", b"5-1"]
    assert second == [b"4-0", b"5-0", b"5-1"]


@pytest.mark.services
def test_a_read_error_reaches_every_viewer_and_the_next_viewer_reads_again(sync, redis_url):
    async def scenario() -> tuple[list[BaseException | list[bytes]], list[bytes]]:
        down = aioredis.Redis.from_url(UNREACHABLE)
        # given three viewers of a run whose Redis cannot be reached
        failed = await asyncio.gather(
            *(collect(down, "0-0") for _ in range(3)), return_exceptions=True
        )
        # when Redis is back and a new viewer comes
        await asyncio.to_thread(publish, sync, [0], True)
        up = aioredis.Redis.from_url(redis_url)
        try:
            return failed, await collect(up, "0-0")
        finally:
            await up.aclose()
            await down.aclose()

    failed, later = asyncio.run(scenario())

    # then each of the three heard of the error, and the new viewer read the stream
    assert all(isinstance(result, redis.exceptions.ConnectionError) for result in failed)
    assert later == [b"1-0", b"1-1"]


@pytest.mark.services
def test_the_reader_stops_when_its_last_viewer_leaves(sync, redis_url):
    async def scenario() -> tuple[bool, bool]:
        client = aioredis.Redis.from_url(redis_url)
        pull = feeds.redis_pull(client, KEY, block_ms=200)
        async with feeds.watching(KEY, "0-0", pull) as feed:
            async with feeds.watching(KEY, "0-0", pull) as same:
                assert same is feed
            await asyncio.sleep(0.05)
            still_reading = not feed.task.done()
        await asyncio.sleep(0.05)
        stopped = feed.task.done()
        await client.aclose()
        return still_reading, stopped and KEY not in feeds._feeds[asyncio.get_running_loop()]

    still_reading, stopped = asyncio.run(scenario())

    assert still_reading and stopped


def test_entry_ids_order_as_numbers():
    assert feeds.entry_order(b"10-0") > feeds.entry_order("9-1") > feeds.entry_order("9-0")
