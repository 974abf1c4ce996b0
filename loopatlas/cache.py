"""Django's Redis cache, failing open: with Redis unreachable it behaves as an empty cache.

The cache only ever holds what can be recomputed (rendered reads, throttle counters), so
a dead Redis must cost speed, not answers: a read misses and is computed, a write is
dropped, and a throttle finds no counter and lets the request through. Each outage is
logged as a warning (at most once per ``WARN_EVERY_S``, not once per request). Socket
timeouts are short by default (``OPTIONS`` in ``CACHES``) so a hung server is treated as
an unreachable one instead of holding every request.
"""

import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

WARN_EVERY_S = 30.0
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

_last_warning = 0.0


def _warn(operation: str, exc: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= WARN_EVERY_S:
        _last_warning = now
        logger.warning("cache unavailable, serving uncached (%s failed: %s)", operation, exc)


def _fail_open(fallback: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    """Run the client method; on a connection failure, log and return ``fallback(*args)``."""

    def decorator(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(self: RedisCacheClient, *args: Any) -> Any:
            try:
                return method(self, *args)
            except UNREACHABLE as exc:
                _warn(method.__name__, exc)
                return fallback(*args)

        return guarded

    return decorator


def _missing(key: str, delta: int) -> int:
    """What an empty cache says to an increment (``loopatlas.throttling`` counts nothing)."""
    raise ValueError(f"Key {key!r} not found (the cache is unreachable).")


class FailOpenRedisCacheClient(RedisCacheClient):
    """The client with every operation guarded; the fallback is what an empty cache says."""

    add = _fail_open(lambda key, value, timeout: False)(RedisCacheClient.add)
    get = _fail_open(lambda key, default: default)(RedisCacheClient.get)
    set = _fail_open(lambda key, value, timeout: None)(RedisCacheClient.set)
    touch = _fail_open(lambda key, timeout: False)(RedisCacheClient.touch)
    delete = _fail_open(lambda key: False)(RedisCacheClient.delete)
    incr = _fail_open(_missing)(RedisCacheClient.incr)
    get_many = _fail_open(lambda keys: {})(RedisCacheClient.get_many)
    has_key = _fail_open(lambda key: False)(RedisCacheClient.has_key)
    set_many = _fail_open(lambda data, timeout: None)(RedisCacheClient.set_many)
    delete_many = _fail_open(lambda keys: None)(RedisCacheClient.delete_many)
    clear = _fail_open(lambda: False)(RedisCacheClient.clear)


_CLIENTS: dict[str, FailOpenRedisCacheClient] = {}
_CLIENTS_LOCK = threading.Lock()


# A burst of more requests than the pool has connections waits up to POOL_WAIT_S for one:
# redis-py's default pool raises "Too many connections" instead, which failing open would
# turn into a burst let through every throttle (150 exports at once all passed 120/minute).
POOL_OPTIONS = {"pool_class": "redis.BlockingConnectionPool", "max_connections": 100}
POOL_WAIT_S = 2.0


class FailOpenRedisCache(RedisCache):
    """The fail-open client, one per process and configuration. Under ASGI Django builds
    a cache object per request context; a client of each one's own would open a new
    connection pool, so a new connection (and redis-py's handshake), every request."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        options = POOL_OPTIONS | {"timeout": POOL_WAIT_S} | params.get("OPTIONS", {})
        self._servers_given, self._client_options = server, options

    @cached_property
    def _cache(self) -> FailOpenRedisCacheClient:
        key = repr((self._servers_given, sorted(self._client_options.items())))
        with _CLIENTS_LOCK:
            if key not in _CLIENTS:
                servers = re.split("[;,]", self._servers_given)  # as Django's RedisCache
                _CLIENTS[key] = FailOpenRedisCacheClient(servers, **self._client_options)
            return _CLIENTS[key]
