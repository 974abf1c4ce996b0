"""One shared read per live run and event loop, handed to all the run's viewers.

A viewer of a live run waits for the entries after its own position. If each viewer read
them itself, every open stream would hold a Redis connection while it waits (or poll the
database on its own) and every entry would be read once per viewer: a crowd watching one
run would cost connections, queries and web CPU in proportion to the crowd. Here one
reader task per (event loop, feed key) reads each entry once, through a ``Pull`` (a
blocking read of the run's Redis stream, or a look at the database: see
``playground.events``), keeps the entries it has read, and hands every viewer the ones
after its position; the cost grows with the runs being watched, not with their viewers.
A read error reaches every viewer waiting, and the next viewer to read starts a new
reader.

Entries are shaped as the run's Redis stream has them (``playground.streams``), whichever
source they came from: ``(b"<p+1>-0", {b"event": b"token", b"data": ...})`` for the token
at position ``p``, ``b"<p+1>-1"`` for the end after the last position ``p``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

Entry = tuple[bytes, dict[bytes, bytes]]  # (entry id, fields), as redis-py returns them
# The entries after an entry id, in id order; [] when none came in the time it waited.
Pull = Callable[[str], Awaitable[list[Entry]]]


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id ``<ms>-<seq>`` as a comparable pair."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def redis_pull(client: Any, key: str, block_ms: int) -> Pull:
    """Reads of the stream ``key`` that wait up to ``block_ms`` for new entries (less
    than ``client``'s socket timeout: ``playground.streams.read_block_ms``)."""

    async def pull(last: str) -> list[Entry]:
        reply = await client.xread({key: last}, count=500, block=block_ms)
        # RESP2 reply of one stream: [(key, [(entry id, {field: value}), ...])]
        return reply[0][1] if reply else []

    return pull


class RunFeed:
    """The entries of one run read so far on this loop, and its one reader."""

    def __init__(self, pull: Pull, start: str) -> None:
        self.pull = pull
        self.entries: list[Entry] = []  # in id order, from the first viewer's start
        self.orders: list[tuple[int, int]] = []  # their ids as pairs, for bisecting
        self.error: BaseException | None = None
        self.viewers = 0
        self.changed = asyncio.Condition()
        self.task = asyncio.ensure_future(self._read(start))

    async def _read(self, start: str) -> None:
        last = start
        while True:
            try:
                entries = await self.pull(last)
            except Exception as exc:  # every viewer hears of it, and decides
                self.error = exc
                async with self.changed:
                    self.changed.notify_all()
                return
            if not entries:
                continue
            self.entries.extend(entries)
            self.orders.extend(entry_order(entry_id) for entry_id, _ in entries)
            last = entries[-1][0].decode()
            async with self.changed:
                self.changed.notify_all()
            if any(entry_id.endswith(b"-1") for entry_id, _ in entries):
                return  # the end entry: nothing follows it

    def after(self, start: str) -> list[Entry]:
        """The entries read so far whose id comes after ``start``."""
        return self.entries[bisect.bisect_right(self.orders, entry_order(start)) :]

    async def read(self, start: str, timeout_s: float) -> list[Entry]:
        """The entries after id ``start``, as soon as there are any, or [] after
        ``timeout_s`` of none; raises what failed the reader."""
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.error or self.after(start)), timeout_s
                )
        if self.error is not None:
            raise self.error
        return self.after(start)


# per event loop: its feeds by stream key (an asyncio task belongs to the loop it runs on)
_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, RunFeed]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def watching(key: str, start: str, pull: Pull) -> AsyncIterator[RunFeed]:
    """The loop's feed ``key`` for one viewer (started at ``start`` by the first, reading
    with its ``pull``); the reader stops when its last viewer leaves."""
    feeds = _feeds.setdefault(asyncio.get_running_loop(), {})
    feed = feeds.get(key)
    if feed is None or feed.error is not None:
        feed = feeds[key] = RunFeed(pull, start)
    feed.viewers += 1
    try:
        yield feed
    finally:
        feed.viewers -= 1
        if not feed.viewers:
            feed.task.cancel()
            if feeds.get(key) is feed:
                del feeds[key]
