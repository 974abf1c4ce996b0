"""What a worker does with a run's message, by the run's state when it arrives: a queued
run is started once; a redelivered one that was already running is never restarted."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from playground.models import Run
from workers import execution

pytestmark = pytest.mark.django_db


def _running(run_factory, *, worker: str, heartbeat_age_s: float) -> Run:
    """A run an attempt on ``worker`` started, its last heartbeat ``heartbeat_age_s`` ago."""
    now = timezone.now()
    return run_factory(
        status=Run.Status.RUNNING,
        worker=worker,
        attempts=1,
        started_at=now - timedelta(seconds=heartbeat_age_s + 1),
        heartbeat_at=now - timedelta(seconds=heartbeat_age_s),
    )


def test_a_message_redelivered_to_the_same_worker_fails_the_run_even_with_a_fresh_heartbeat(
    run_factory,
) -> None:
    # given: this worker's earlier process started the run moments ago, then died, and
    # the broker handed the message back to the same worker name
    run = _running(run_factory, worker="w1", heartbeat_age_s=1)
    # when
    result = execution.run_execute(run_id=run.id, worker="w1")
    # then the run ends failed with the reason, rather than staying running forever
    run.refresh_from_db()
    assert result is None
    assert run.status == Run.Status.FAILED and run.finished_at is not None
    assert run.error == "its worker was lost mid-run"
    assert run.attempts == 1


def test_a_stale_run_of_another_worker_is_failed(settings, run_factory):
    run = _running(run_factory, worker="w2", heartbeat_age_s=settings.PLAYGROUND_STALE_AFTER_S + 5)
    assert execution.run_execute(run_id=run.id, worker="w1") is None
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.error == "its worker was lost mid-run"


def test_a_fresh_run_of_another_worker_is_left_to_it(run_factory) -> None:
    run = _running(run_factory, worker="w2", heartbeat_age_s=1)
    assert execution.run_execute(run_id=run.id, worker="w1") is None
    run.refresh_from_db()
    assert (run.status, run.worker, run.finished_at, run.error) == ("running", "w2", None, "")


def test_a_queued_run_is_started_once_by_the_worker_that_takes_it(run_factory) -> None:
    # given
    run = run_factory(params={"max_new_tokens": 2, "q": 0.7, "loops": None, "seed": 0})
    # when
    finished = execution.run_execute(run_id=run.id, worker="w1")
    # then
    run.refresh_from_db()
    assert finished is not None and finished.pk == run.pk
    assert (run.status, run.worker, run.attempts) == ("done", "w1", 1)
    assert run.started_at is not None and run.started_at <= run.finished_at
    # and the same message again changes nothing
    assert execution.run_execute(run_id=run.id, worker="w1") is None
    run.refresh_from_db()
    assert (run.status, run.attempts) == ("done", 1)


def test_a_message_for_no_run_is_skipped() -> None:
    assert execution.run_execute(run_id=uuid.uuid4(), worker="w1") is None
