"""Per-address rates hold under bursts: of requests arriving together, exactly the rate
passes. On the real Redis cache, as deployed (LocMem's lock would hide a race)."""

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from django.test import Client, RequestFactory
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from atlas.throttles import ExportThrottle, SuggestionThrottle
from loopatlas.throttling import AdminLoginThrottle
from playground.throttles import RunSubmitThrottle
from tests.playground.stack import free_port

pytestmark = [pytest.mark.services, pytest.mark.django_db]

ADDRESS = "203.0.113.9"


def _cache_at(url: str) -> dict:
    options = {"socket_connect_timeout": 0.5, "socket_timeout": 1.0}
    return {
        "default": {"BACKEND": "loopatlas.cache.FailOpenRedisCache", "LOCATION": url}
        | {"OPTIONS": options}
    }


@pytest.fixture(autouse=True)
def redis_cache(settings, redis_url):
    """The site's Redis cache (a database of the tests' own), emptied around each test."""
    settings.CACHES = _cache_at(redis_url)
    cache.clear()
    yield
    cache.clear()


def _request(address: str = ADDRESS) -> Request:
    request = RequestFactory().post("/", REMOTE_ADDR=address)
    request.user = AnonymousUser()
    return cast(Request, request)


def burst(throttle_class: type[SimpleRateThrottle], count: int) -> int:
    """How many of ``count`` requests from one address, checked at once, pass."""
    barrier = threading.Barrier(count)

    def one(_: int) -> bool:
        throttle, request = throttle_class(), _request()
        barrier.wait()
        return throttle.allow_request(request, None)  # type: ignore[arg-type]

    with ThreadPoolExecutor(count) as pool:
        return sum(pool.map(one, range(count)))


@pytest.mark.parametrize(
    ("throttle_class", "rate", "count"),
    [
        (RunSubmitThrottle, 12, 25),  # PLAYGROUND_VISITOR_SUBMITS: 12/minute
        (SuggestionThrottle, 10, 25),  # THROTTLE_SUGGESTIONS: 10/hour
        (ExportThrottle, 120, 150),  # THROTTLE_EXPORTS: 120/minute
        (AdminLoginThrottle, 10, 25),  # THROTTLE_ADMIN_LOGIN: 10/hour
    ],
)
def test_a_burst_from_one_address_passes_exactly_the_rate(clock, throttle_class, rate, count):
    assert throttle_class().num_requests == rate  # the site's default
    assert burst(throttle_class, count) == rate


def test_a_burst_of_wrong_admin_passwords_is_checked_at_most_the_rate_times(clock):
    # given 25 sign-in attempts from one address at once (the limit is 10/hour)
    barrier = threading.Barrier(25)
    wrong = {"username": "curator", "password": "not-the-password"}

    def attempt(_: int) -> int:
        client = Client()
        barrier.wait()
        return client.post("/admin/login/", wrong, REMOTE_ADDR=ADDRESS).status_code

    with ThreadPoolExecutor(25) as pool:
        codes = list(pool.map(attempt, range(25)))
    # then ten were checked (the form again), the rest refused
    assert sorted(codes) == [200] * 10 + [429] * 15


def test_a_refusal_says_when_the_window_ends_and_the_budget_renews_then(clock):
    # given the budget spent
    throttle = SuggestionThrottle()
    assert all(throttle.allow_request(_request(), None) for _ in range(10))
    # when one more comes
    refused = not throttle.allow_request(_request(), None)
    wait = throttle.wait()
    # then it is refused until the window ends, and passes once it has
    assert refused and wait is not None and 0 < wait <= 3600
    clock[0] += wait - 1
    assert not throttle.allow_request(_request(), None)
    clock[0] += 1
    assert throttle.allow_request(_request(), None)


def test_a_request_costing_more_than_is_left_is_refused_and_takes_nothing(clock):
    # given two of twelve submits left
    throttle = RunSubmitThrottle()
    assert all(throttle.allow_request(_request(), None) for _ in range(10))
    # when three are asked for at once, then two
    three = throttle.allow_request(_request(), None, cost=3)
    two = throttle.allow_request(_request(), None, cost=2)
    # then
    assert (three, two) == (False, True)
    assert not throttle.allow_request(_request(), None)


def test_other_addresses_keep_their_own_budgets(clock):
    throttle = AdminLoginThrottle()
    assert all(throttle.allow_request(_request(), None) for _ in range(10))
    assert throttle.allow_request(_request("198.51.100.7"), None)


def test_with_redis_unreachable_every_request_goes_through(settings):
    # given the cache on a port where nothing listens
    settings.CACHES = _cache_at(f"redis://127.0.0.1:{free_port()}/0")
    # when more than the rate arrive
    passed = [RunSubmitThrottle().allow_request(_request(), None) for _ in range(15)]
    # then none is refused (the cache degrades to allowing)
    assert all(passed)
