"""Waiting out a database restart (loopatlas.outage), against the suite's own database:
on PostgreSQL the server ends this thread's connection as a restart would
(``server_drops_our_connection``)."""

import logging

import pytest
from django.db import OperationalError, connection

from loopatlas import outage
from loopatlas.outage import through_outage
from playground.models import Run


def _counted(calls: list[int]):
    def count_runs() -> int:
        calls.append(1)
        return Run.objects.count()

    return count_runs


@pytest.mark.django_db(transaction=True)
def test_an_action_on_a_dropped_connection_is_done_again_on_a_new_one(
    server_drops_our_connection, caplog, monkeypatch
):
    # given a connection the server has ended
    monkeypatch.setattr(outage, "RETRY_EVERY_S", 0.01)
    server_drops_our_connection()
    calls: list[int] = []
    # when an action runs through the outage
    with caplog.at_level(logging.WARNING, logger="loopatlas.outage"):
        runs = through_outage(_counted(calls), budget_s=5, what="a count")
    # then it failed once, was done again on a new connection, and said so
    assert runs == 0 and len(calls) == 2
    (warning,) = caplog.records
    assert warning.getMessage().startswith("a count: the database is unreachable (")


@pytest.mark.django_db(transaction=True)
def test_an_outage_past_its_budget_is_raised(server_drops_our_connection):
    server_drops_our_connection()
    calls: list[int] = []
    with pytest.raises(OperationalError):
        through_outage(_counted(calls), budget_s=0, what="a count")
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_a_database_error_on_a_live_connection_is_raised_at_once():
    # a statement the database refuses is a bug to see, not an outage to wait out
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        connection.ensure_connection()
        raise OperationalError("too complex")

    with pytest.raises(OperationalError, match="too complex"):
        through_outage(refused, budget_s=60, what="a refused statement")
    assert len(calls) == 1
