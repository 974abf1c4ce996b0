"""Sign-in attempts to the admin are limited per client address."""

from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client

pytestmark = pytest.mark.django_db

LIMIT = 10  # THROTTLE_ADMIN_LOGIN's default: 10/hour
WRONG = {"username": "curator", "password": "not-the-password"}


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """The counters live in the cache; every test starts with none."""
    cache.clear()
    yield
    cache.clear()


def _attempt(client: Client, address: str = "203.0.113.7", **headers: str) -> int:
    response = client.post("/admin/login/", WRONG, REMOTE_ADDR=address, headers=headers)
    return response.status_code


def test_the_attempt_past_the_limit_is_refused_with_a_clear_429(client: Client) -> None:
    # given the address's whole budget spent on wrong passwords (each one re-shows the form)
    assert {_attempt(client) for _ in range(LIMIT)} == {200}
    # when it tries once more
    response = client.post("/admin/login/", WRONG, REMOTE_ADDR="203.0.113.7")
    # then it is refused and told when to come back; the form itself still shows
    assert response.status_code == 429
    assert "Too many sign-in attempts" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert client.get("/admin/login/", REMOTE_ADDR="203.0.113.7").status_code == 200


def test_another_address_keeps_its_own_budget(client: Client) -> None:
    for _ in range(LIMIT + 1):
        _attempt(client)
    assert _attempt(client, address="198.51.100.2") == 200


def test_a_made_up_forwarded_for_does_not_reset_the_limit(client: Client) -> None:
    # given the budget spent (NUM_PROXIES is 0: no forwarded header is trusted)
    for _ in range(LIMIT):
        _attempt(client)
    # when each further attempt claims a new address
    statuses = [_attempt(client, **{"X-Forwarded-For": f"10.0.0.{n}"}) for n in range(5)]
    # then all are refused
    assert statuses == [429] * 5


def test_behind_a_configured_proxy_the_forwarded_client_counts(client: Client, settings) -> None:
    # given one trusted proxy (it appends the real client to X-Forwarded-For)
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"NUM_PROXIES": 1}
    for _ in range(LIMIT):
        _attempt(client, address="10.0.0.1", **{"X-Forwarded-For": "203.0.113.7"})
    # then that client is limited, and another client through the same proxy is not
    assert _attempt(client, address="10.0.0.1", **{"X-Forwarded-For": "203.0.113.7"}) == 429
    assert _attempt(client, address="10.0.0.1", **{"X-Forwarded-For": "198.51.100.2"}) == 200
