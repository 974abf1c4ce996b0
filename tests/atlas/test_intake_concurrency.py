"""The intake holds when requests arrive together: 20 identical proposals make one
proposal and 19 refusals, and curators accepting at once never give two works one number
or accept one proposal twice.

Each thread has its own database connection and they are released by a barrier; the
database is the real PostgreSQL when DATABASE_URL names it (else a SQLite file as
deployed), and the throttles count on the real Redis. Each check that would race waits,
having read, for the others to have read too (up to a few seconds), so writes that do not
exclude one another would all read before any writes.
"""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any
from unittest import mock

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client

from atlas import proposals
from atlas.models import Proposal, Work
from atlas.services import ReviewError
from tests.atlas.api.test_proposals import post, proposal
from tests.loopatlas.test_throttle_atomic import _cache_at

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("deployed_database"),
]


@pytest.fixture(autouse=True)
def redis_cache(settings, redis_url):
    settings.CACHES = _cache_at(redis_url)
    cache.clear()
    yield
    cache.clear()


def read_together(name: str, count: int):
    """``proposals.<name>`` made to wait, once it has run, until ``count`` threads have."""
    barrier, original = threading.Barrier(count), getattr(proposals, name)

    def waiting(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        with suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=3)
        return result

    return mock.patch.object(proposals, name, waiting)


def at_once(count: int, call: Callable[[int], Any]) -> list[Any]:
    started = threading.Barrier(count)

    def one(number: int) -> Any:
        started.wait()
        try:
            return call(number)
        finally:
            connection.close()  # each thread's own

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def test_twenty_identical_proposals_at_once_make_one(small_atlas) -> None:
    # when 20 visitors (from 20 addresses) send the same proposal at once
    with read_together("duplicate_candidates", 20):
        codes = at_once(20, lambda n: post(Client(), proposal(), f"198.51.100.{n + 1}").status_code)
    # then one is stored and every other is refused as its duplicate
    assert sorted(codes) == [201] + [409] * 19
    assert Proposal.objects.count() == 1


def _accept(pk: int) -> str:
    try:
        proposals.proposal_accept(proposal=Proposal.objects.get(pk=pk), reviewer=None)
    except ReviewError as exc:
        return str(exc)
    return "accepted"


def test_two_curators_accepting_at_once_give_two_numbers_and_slugs(small_atlas) -> None:
    # given two pending proposals
    first = post(Client(), proposal()).json()["id"]
    second = post(Client(), proposal(title="Halting Loops", arxiv_id="2611.09999")).json()["id"]
    # when two curators accept them at once
    with read_together("record_from_row", 2):
        results = at_once(2, lambda n: _accept((first, second)[n]))
    # then both are works, numbered one after the other
    assert results == ["accepted", "accepted"]
    added = Work.objects.filter(proposal__isnull=False).order_by("position")
    assert [w.position for w in added] == [9, 10]
    assert len({w.slug for w in added}) == 2


def test_one_proposal_accepted_by_two_curators_at_once_is_one_work(small_atlas) -> None:
    pk = post(Client(), proposal()).json()["id"]
    with read_together("record_from_row", 2):
        results = at_once(2, lambda n: _accept(pk))
    assert sorted(results) == [f"Proposal #{pk} was already Accepted.", "accepted"]
    assert Work.objects.filter(proposal__isnull=False).count() == 1
