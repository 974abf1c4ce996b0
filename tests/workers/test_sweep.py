"""Each worker's sweep: a stale run is failed every few seconds with no viewer, submit or
worker start needed, and a sweep that fails (the database down) does not end the thread."""

import time
from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError
from django.utils import timezone

from playground import services
from playground.models import Run
from workers import sweep, tasks

pytestmark = pytest.mark.django_db(transaction=True)  # the sweep reads on a thread of its own


def _stale_running(run_factory, settings) -> Run:
    beat = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    return run_factory(status=Run.Status.RUNNING, heartbeat_at=beat, worker="w@gone")


def _status_within(run: Run, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status != Run.Status.RUNNING:
            break
        time.sleep(0.05)
    return run.status


def test_a_started_worker_fails_a_stale_run_on_its_own(run_factory, settings):
    # given a worker that has started (its startup sweep done), then a run going stale
    settings.PLAYGROUND_STALE_SWEEP_S = 0.2
    tasks._sweep_start()
    try:
        run = _stale_running(run_factory, settings)

        # when nobody reads the run: then within a few sweeps it is failed with the reason
        assert _status_within(run, seconds=5) == Run.Status.FAILED
        assert "stopped responding" in run.error and "w@gone" not in run.error
    finally:
        tasks._sweep_stop()
    assert not tasks._sweepers


def test_a_sweep_that_fails_is_tried_again(run_factory, settings):
    # given a sweeper whose first sweep meets a database error
    run = _stale_running(run_factory, settings)
    real = services.run_fail_stale
    calls = []

    def down_once() -> list:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("the database is restarting")
        return real()

    # when
    with mock.patch.object(services, "run_fail_stale", down_once):
        sweeper = sweep.Sweeper(every_s=0.1).start()
        try:
            status = _status_within(run, seconds=5)
        finally:
            sweeper.stop()

    # then the next sweep failed the run, and the thread stopped when asked
    assert status == Run.Status.FAILED and len(calls) >= 2
    assert not sweeper.thread.is_alive()
