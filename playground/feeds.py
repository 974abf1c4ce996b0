"""One blocking read per live run and event loop, shared by all the run's viewers.

A viewer of a live run waits for the Redis stream entries after its own position. If
each viewer read the stream itself, every open stream would hold a Redis connection
while it waits and every entry would be read once per viewer: a crowd watching one run
would cost Redis connections and web CPU in proportion to the crowd. Here one reader
task per (event loop, run) reads each entry once, keeps the entries it has read, and
hands every viewer the ones after its position; Redis connections grow with the runs
being watched, not with their viewers. A read error reaches every viewer waiting, and
the next viewer to read starts a new reader.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

Entry = tuple[bytes, dict[bytes, bytes]]  # (entry id, fields), as redis-py returns them


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id ``<ms>-<seq>`` as a comparable pair."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class RunFeed:
    """The entries of one run's stream read so far on this loop, and its one reader."""

    def __init__(self, client: Any, key: str, start: str, block_ms: int) -> None:
        self.client, self.key, self.block_ms = client, key, block_ms
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
                reply = await self.client.xread({self.key: last}, count=500, block=self.block_ms)
            except Exception as exc:  # every viewer hears of it, and decides
                self.error = exc
                async with self.changed:
                    self.changed.notify_all()
                return
            if not reply:
                continue
            # RESP2 reply of one stream: [(key, [(entry id, {field: value}), ...])]
            entries: list[Entry] = reply[0][1]
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
async def watching(client: Any, key: str, start: str, block_ms: int) -> AsyncIterator[RunFeed]:
    """The loop's feed of stream ``key`` for one viewer (started at ``start`` by the
    first); the reader stops when its last viewer leaves."""
    feeds = _feeds.setdefault(asyncio.get_running_loop(), {})
    feed = feeds.get(key)
    if feed is None or feed.error is not None:
        feed = feeds[key] = RunFeed(client, key, start, block_ms)
    feed.viewers += 1
    try:
        yield feed
    finally:
        feed.viewers -= 1
        if not feed.viewers:
            feed.task.cancel()
            if feeds.get(key) is feed:
                del feeds[key]
