"""The fail-open cache and the 503 middleware, each on its own (the fault tests in
test_faults.py stop real servers under a running site)."""

import logging
import threading

import pytest
from django.db import OperationalError
from django.http import HttpResponse
from django.test import RequestFactory

from loopatlas import cache as fail_open
from loopatlas.cache import FailOpenRedisCache
from loopatlas.middleware import ServiceUnavailableMiddleware
from tests.playground.stack import free_port


def test_an_unreachable_redis_is_an_empty_cache_with_one_warning(caplog, monkeypatch) -> None:
    # given a cache on a port where nothing listens
    monkeypatch.setattr(fail_open, "_last_warning", -fail_open.WARN_EVERY_S)
    url = f"redis://127.0.0.1:{free_port()}/0"
    cache = FailOpenRedisCache(url, {"OPTIONS": {"socket_connect_timeout": 0.2}})
    # when it is used as a throttle uses it
    with caplog.at_level(logging.WARNING, logger="loopatlas.cache"):
        history = cache.get("throttle_anon_1", [])
        cache.set("throttle_anon_1", ["now"], 60)
        outcomes = (cache.add("k", 1), cache.get_many(["a", "b"]), cache.has_key("k"))
    # then it answers as an empty cache would, and warns once for the outage
    assert history == [] and outcomes == (False, {}, False)
    assert [r.getMessage()[:35] for r in caplog.records] == ["cache unavailable, serving uncached"]


def test_the_caches_of_many_requests_share_one_connection(redis_url) -> None:
    import redis

    # given the cache as Django builds it for each request (a new object per request
    # context, here each on a thread of its own, as ASGI runs a request's sync code)
    name = f"cache-test-{free_port()}"
    options = {"OPTIONS": {"client_name": name}}

    def request(number: int) -> object:
        cache = FailOpenRedisCache(redis_url, options)
        cache.set(f"{name}:{number}", number, 60)
        return cache.get(f"{name}:{number}")

    # when eight requests come one after another
    answers = []
    for number in range(8):
        thread = threading.Thread(target=lambda n=number: answers.append(request(n)))
        thread.start()
        thread.join()
    # then each was answered, and the server saw one connection from them all
    assert answers == list(range(8))
    clients = redis.Redis.from_url(redis_url).client_list()
    assert [client["name"] for client in clients].count(name) == 1


@pytest.mark.django_db
def test_a_database_error_on_a_live_connection_stays_a_server_error() -> None:
    # a refused statement is a bug to see, not an outage to hide behind a 503
    request = RequestFactory().get("/api/v1/works/")
    middleware = ServiceUnavailableMiddleware(lambda request: HttpResponse())
    assert middleware.process_exception(request, OperationalError("too complex")) is None
