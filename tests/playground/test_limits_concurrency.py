"""The active-run limits hold when submits arrive at once: per visitor, per address (a
fresh cookie buys no new slot) and site-wide; and "Compare with…" counts a submit per run.

Submits go through the API and the page as a visitor's would, each thread with its own
database connection, released together by a barrier. The database is the real
PostgreSQL when DATABASE_URL names it, else a SQLite file as deployed (the suite's
in-memory SQLite is shared-cache, where a second writer fails at once instead of waiting).
"""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from unittest import mock

import pytest
from django.db import connection
from django.test import Client

from playground import selectors, services
from playground.models import Run
from playground.siblings import COMPARE_SIBLINGS
from tests.playground.conftest import PROMPT
from tests.playground.test_pages import _form

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("deployed_database"),
]

RUNS = "/api/v1/runs/"


@pytest.fixture(autouse=True)
def _no_broker():
    with mock.patch.object(services, "run_enqueue"):
        yield


@pytest.fixture
def unlimited_rate(settings):
    """Only the active-run limits refuse (the submit rate is another test's business)."""
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] | {
        "playground_submits": "1000/minute"
    }
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"DEFAULT_THROTTLE_RATES": rates}


def at_once(count: int, submit: Callable[[int], int]) -> list[int]:
    """``submit(n)`` on ``count`` threads released together; their status codes.

    Each submit, having counted the active runs, waits (up to a second) for all the others
    to have counted too: submits that do not exclude one another then all count before
    any inserts, the race made certain rather than likely. Submits that do exclude one
    another cannot all count at once: the first waits its second out, the rest go on.
    """
    started, counted = threading.Barrier(count), threading.Barrier(count)
    run_active_counts = selectors.run_active_counts

    def count_together(**kwargs) -> selectors.ActiveCounts:
        counts = run_active_counts(**kwargs)
        with suppress(threading.BrokenBarrierError):
            counted.wait(timeout=3)
        return counts

    def one(number: int) -> int:
        started.wait()
        try:
            return submit(number)
        finally:
            connection.close()  # each thread's own connection

    with (
        mock.patch.object(selectors, "run_active_counts", count_together),
        ThreadPoolExecutor(count) as pool,
    ):
        return list(pool.map(one, range(count)))


def api_submit(address: str) -> int:
    body = {"prompt": PROMPT, "max_new_tokens": 4}
    response = Client().post(RUNS, body, content_type="application/json", REMOTE_ADDR=address)
    return response.status_code


def test_simultaneous_submits_from_one_address_create_at_most_its_limit(settings, unlimited_rate):
    # given
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    # when 20 submits from one address arrive at once
    codes = at_once(20, lambda n: api_submit("198.51.100.1"))
    # then
    assert sorted(codes) == [201] * 2 + [429] * 18
    assert Run.objects.filter(status__in=Run.ACTIVE).count() == 2


def test_simultaneous_submits_from_many_addresses_fill_at_most_the_queue(settings, unlimited_rate):
    # given
    settings.PLAYGROUND_MAX_QUEUED = 8
    # when 50 addresses submit at once
    codes = at_once(50, lambda n: api_submit(f"198.51.100.{n + 1}"))
    # then
    assert sorted(codes) == [201] * 8 + [429] * 42
    assert Run.objects.filter(status__in=Run.ACTIVE).count() == 8


def test_a_fresh_cookie_per_page_submit_buys_no_new_slot(settings, unlimited_rate):
    # given
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    # when one address submits from the page at once with a new session each time
    codes = at_once(10, lambda n: Client().post("/playground/", _form()).status_code)
    # then only the address's slots are taken; the page redirects to each run it started
    assert sorted(codes) == [302] * 2 + [429] * 8
    assert Run.objects.filter(address="address:127.0.0.1").count() == 2
    assert Run.objects.values("visitor").distinct().count() == 2


def test_a_fresh_cookie_and_the_api_share_the_address_slots(settings, unlimited_rate):
    # given the address's slots taken from the API
    settings.PLAYGROUND_VISITOR_ACTIVE = 2
    assert [api_submit("127.0.0.1") for _ in range(2)] == [201, 201]
    # when a new session from the same address submits from the page
    response = Client().post("/playground/", _form())
    # then
    assert response.status_code == 429
    assert "PLAYGROUND_VISITOR_ACTIVE" in response.content.decode()


def test_compare_with_counts_one_submit_per_run_it_starts(settings, run_factory):
    # given a submit rate of three a minute and a finished run to compare with
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] | {"playground_submits": "3/minute"}
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"DEFAULT_THROTTLE_RATES": rates}
    origin = run_factory(status=Run.Status.DONE)
    client = Client()
    # when two siblings are started (the q preset), then one run, then one more
    compared = client.post(f"/playground/runs/{origin.id}/compare/", {"compare-preset": "q"})
    codes = [api_submit("127.0.0.1") for _ in range(2)]
    # then the two siblings and the one run spent the three submits
    assert compared.status_code == 302
    assert codes == [201, 429]
    assert Run.objects.filter(compare_of=origin).count() == 2


def test_a_compare_over_the_rate_is_refused_whole(settings, run_factory):
    # given one submit a minute
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] | {"playground_submits": "1/minute"}
    settings.REST_FRAMEWORK = settings.REST_FRAMEWORK | {"DEFAULT_THROTTLE_RATES": rates}
    origin = run_factory(status=Run.Status.DONE)
    # when a comparison would start two runs
    compared = Client().post(f"/playground/runs/{origin.id}/compare/", {"compare-preset": "q"})
    # then none starts, and the refused attempt took nothing from the budget
    assert compared.status_code == 429
    assert "PLAYGROUND_VISITOR_SUBMITS" in compared.content.decode()
    assert not Run.objects.filter(compare_of=origin).exists()
    assert api_submit("127.0.0.1") == 201


def test_fresh_sessions_from_one_address_share_the_siblings_of_a_run(settings, run_factory):
    # given a run compared as often as may be from one address, by one session
    origin = run_factory(status=Run.Status.DONE)
    address = "address:198.51.100.5"
    services.run_compare_submit(
        run=origin,
        variants=[{"q": 0.3}, {"q": 0.5}][:COMPARE_SIBLINGS],
        visitor="session:a",
        address=address,
    )
    # when another session from the same address compares it once more
    with pytest.raises(services.VisitorLimit, match="comparing with this one"):
        services.run_compare_submit(
            run=origin, variants=[{"q": 0.6}], visitor="session:b", address=address
        )
    # then
    assert Run.objects.filter(compare_of=origin).count() == COMPARE_SIBLINGS
