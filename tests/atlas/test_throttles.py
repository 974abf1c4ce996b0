"""Per-address limits identify a client by its peer address; X-Forwarded-For counts only
as far as the operator's own proxies (``NUM_PROXIES``) append to it."""

import pytest

from atlas.throttles import ExportThrottle

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_exports_a_minute(monkeypatch):
    monkeypatch.setattr(ExportThrottle, "THROTTLE_RATES", {"exports": "2/minute"})


def _suggest(client, forwarded_for: str) -> int:
    """One suggestion through the page's form (it shares the API's budget)."""
    data = {"field": "venue", "proposed_value": "ICLR", "rationale": "r"}
    url = "/works/universal-transformers/suggest/"
    return client.post(url, data, HTTP_X_FORWARDED_FOR=forwarded_for).status_code


def _export(client, forwarded_for: str) -> int:
    return client.get("/api/v1/export/", HTTP_X_FORWARDED_FOR=forwarded_for).status_code


def test_a_made_up_forwarded_for_does_not_reset_the_suggestion_limit(client, small_atlas):
    # given the budget spent from one address
    statuses = [_suggest(client, "203.0.113.1") for _ in range(10)]
    # when the same client claims a new address on every request
    spoofed = [_suggest(client, f"203.0.113.{n}") for n in range(2, 6)]
    # then
    assert statuses == [302] * 10 and spoofed == [429] * 4


def test_a_made_up_forwarded_for_does_not_reset_the_export_limit(
    client, small_atlas, two_exports_a_minute
):
    statuses = [_export(client, f"203.0.113.{n}") for n in range(4)]
    assert statuses == [200, 200, 429, 429]


def test_behind_one_proxy_its_forwarded_address_identifies_the_client(
    client, small_atlas, two_exports_a_minute, settings
):
    # given one proxy, which appends the address it saw to what the client sent
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"NUM_PROXIES": 1}
    # when two clients behind it export, each claiming a fixed made-up address first
    first = [_export(client, "10.9.9.9, 198.51.100.1") for _ in range(3)]
    second = [_export(client, "10.9.9.9, 198.51.100.2") for _ in range(3)]
    # then each has its own budget, keyed by the address the proxy saw
    assert first == second == [200, 200, 429]
