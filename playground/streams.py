"""The run's Redis stream (full stack only): how the worker publishes and viewers read.

One stream per run, ``playground:run:<id>``. Entry ids are explicit so that a viewer
can start right after the last position it has, and a replayed event can never be
added twice:

- the token at position ``p`` is entry ``<p+1>-0`` with fields ``event=token`` and
  ``data=<TokenEvent JSON>``;
- the final entry, after the last position ``p`` (``p = -1`` when there is none), is
  ``<p+1>-1`` with ``event=done`` or ``event=error`` and ``data={"status", "stats"|"error"}``.

A viewer that has everything up to position ``k`` reads after ``<k+1>-0``. The stream
expires ``PLAYGROUND_STREAM_TTL_S`` after its last write; the database keeps the run.
In the embedded mode (no ``REDIS_URL``) nothing is published and viewers read the
database instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Iterable
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

KEY = "playground:run:{}"
# Connections of the viewers' shared client: each live run watched on a loop holds one
# for its blocking read (playground.feeds), and redis-py's asyncio pool stops at 100 (a
# viewer refused one would poll the database instead); Redis's own ``maxclients``
# (10,000 by default) is the bound.
READERS_MAX = 10_000
# The viewers' client gives up on a socket read after READ_TIMEOUT_S (a connection gone
# dead), and the shared blocking read asks Redis to answer within half of it, so a quiet
# stream's read returns empty (and is asked again) long before the socket times out. A
# block as long as the timeout or longer fails every quiet read, and sends every viewer
# of a quiet run to the database.
READ_TIMEOUT_S = 5.0


def stream_key(run_id: object) -> str:
    return KEY.format(run_id)


def token_entry_id(position: int) -> str:
    return f"{position + 1}-0"


def end_entry_id(last_position: int) -> str:
    return f"{last_position + 1}-1"


def after_position_id(position: int) -> str:
    """The id to read after, for a viewer that has every position up to ``position``."""
    return f"{position + 1}-0"


def read_block_ms() -> int:
    """How long the shared read of a run's stream blocks: under the socket timeout."""
    return int(READ_TIMEOUT_S * 1000 / 2)


_client = None
# The event loop's client for viewers, with the URL it was made for (per loop: an asyncio
# connection belongs to the loop it was opened on).
_readers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def _redis():
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(settings.REDIS_URL)
    return _client


def publishing() -> bool:
    return bool(settings.REDIS_URL)


def publish_tokens(*, run_id: object, events: Iterable[dict[str, Any]]) -> None:
    """Add token events (in position order) to the run's stream; already there is a no-op."""
    publish_encoded(
        run_id=run_id, entries=[(event["position"], json.dumps(event)) for event in events]
    )


def publish_encoded(*, run_id: object, entries: Iterable[tuple[int, str]]) -> None:
    """``publish_tokens`` for events already encoded: (position, JSON) pairs."""
    if not publishing():
        return
    key = stream_key(run_id)
    pipe = _redis().pipeline(transaction=False)
    for position, data in entries:
        pipe.xadd(key, {"event": "token", "data": data}, id=token_entry_id(position))
    pipe.expire(key, settings.PLAYGROUND_STREAM_TTL_S)
    _execute(pipe)


def publish_end(*, run_id: object, last_position: int, event: str, data: dict) -> None:
    """Add the final ``done``/``error`` entry; a second final entry is refused by Redis."""
    if not publishing():
        return
    key = stream_key(run_id)
    pipe = _redis().pipeline(transaction=False)
    fields = {"event": event, "data": json.dumps(data)}
    pipe.xadd(key, fields, id=end_entry_id(last_position))
    pipe.expire(key, settings.PLAYGROUND_STREAM_TTL_S)
    _execute(pipe)


def _execute(pipe) -> None:
    """Send the pipeline. An id already in the stream (a replayed event) is no error, and
    an unreachable Redis only costs liveness: the database holds every event, and
    viewers read the positions the stream lacks from it."""
    import redis

    try:
        pipe.execute(raise_on_error=False)
    except redis.exceptions.RedisError as exc:
        logger.warning("could not publish to the run stream: %s", exc)


async def reading_client() -> Any:
    """The running loop's asyncio client for viewers, shared by all of them: a client of
    each viewer's own would open a connection and run redis-py's handshake per stream. A
    live run's shared read (:mod:`playground.feeds`) holds one of its pooled connections
    while it waits (``READERS_MAX`` of them)."""
    import redis.asyncio as aioredis

    loop = asyncio.get_running_loop()
    held = _readers.get(loop)
    if held is not None and held[0] == settings.REDIS_URL:
        return held[1]
    client = aioredis.Redis.from_url(
        settings.REDIS_URL, max_connections=READERS_MAX, socket_timeout=READ_TIMEOUT_S
    )
    _readers[loop] = (settings.REDIS_URL, client)
    if held is not None:
        await held[1].aclose()
    return client


def stream_reset_client() -> None:
    """Forget the cached connection (tests that point REDIS_URL elsewhere)."""
    global _client
    _client = None
