"""No reader sees ``running`` a run whose worker died for longer than the stale bound:
reading the run fails it first, and every worker's sweep fails it unread. In process on
a stale run, then for real: a worker process killed (SIGKILL) with no viewer attached."""

import os
import signal
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from playground.models import Run
from tests.playground.conftest import PROMPT
from tests.playground.stack import Stack, suite_stack

STALE_S = 3  # PLAYGROUND_STALE_AFTER_S of the real stack below
SWEEP_S = 1  # PLAYGROUND_STALE_SWEEP_S of its workers


def _stale(run_factory, settings) -> Run:
    beat = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    return run_factory(status=Run.Status.RUNNING, heartbeat_at=beat, worker="celery@gpu1")


@pytest.mark.parametrize("path", ["/api/v1/runs/{id}/", "/playground/runs/{id}/"])
def test_reading_a_run_whose_worker_went_quiet_fails_it_first(client, run_factory, path):
    # given
    run = _stale(run_factory, settings)

    # when
    response = client.get(path.format(id=run.id))

    # then the reader is told it failed, and why, without the worker's host name
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error == (
        f"the worker running it stopped responding for over "
        f"{settings.PLAYGROUND_STALE_AFTER_S} s; it was lost mid-run"
    )
    assert "celery@gpu1" not in response.content.decode()


def test_reading_a_run_with_a_fresh_heartbeat_leaves_it_running(client, run_factory):
    run = run_factory(status=Run.Status.RUNNING, heartbeat_at=timezone.now(), worker="w")

    assert client.get(f"/api/v1/runs/{run.id}/").json()["status"] == "running"


# -- a real stack: uvicorn and Celery worker processes


@pytest.fixture(scope="module")
def stack(redis_url, django_db_setup, django_db_blocker, tmp_path_factory):
    redis.Redis.from_url(redis_url).flushdb()
    workdir = tmp_path_factory.mktemp("stale-reads")
    stack = suite_stack(workdir, redis_url=redis_url)
    stack.env |= {
        "PLAYGROUND_STALE_AFTER_S": str(STALE_S),
        "PLAYGROUND_STALE_SWEEP_S": str(SWEEP_S),
        "PLAYGROUND_TOKEN_DELAY_S": "0.1",  # a run lasts longer than a worker takes to start
    }
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture
def live(stack, transactional_db):
    """The stack, with the suite's tables emptied after the test (PostgreSQL)."""
    return stack


def _running_run(live: Stack) -> dict:
    """A run the worker is generating (a long one: it is still going when the worker dies)."""
    run = live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=256)
    deadline = time.monotonic() + 30
    while live.get(run["api_url"]).json()["status"] != "running":
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.1)
    return run


def _failed_within(read, *, seconds: float) -> None:
    """``read()`` (a run's status) answers ``failed`` within ``seconds``."""
    started = time.monotonic()
    while read() != "failed":
        assert time.monotonic() - started < seconds, f"still running after {seconds} s"
        time.sleep(0.2)


@pytest.mark.services
@pytest.mark.slow
def test_a_killed_workers_run_reads_failed_within_the_stale_bound_with_no_worker_left(live):
    # given a run in flight, and no viewer
    run = _running_run(live)

    # when its worker is killed, and no worker is started again
    live.kill_worker()
    try:
        # then readers of the run see it failed within the stale bound (and some polling)
        _failed_within(lambda: live.get(run["api_url"]).json()["status"], seconds=STALE_S + 1.5)
        assert "stopped responding" in live.get(run["api_url"]).json()["error"]
    finally:
        live.start_worker()


@pytest.mark.services
@pytest.mark.slow
def test_a_killed_workers_run_is_failed_unread_by_another_workers_sweep(live):
    # given a run in flight, and no viewer
    run = _running_run(live)

    # when another worker (another name) has started, its startup sweep done, and then
    # the run's worker is killed
    first = live.worker
    assert first is not None
    live.worker_name = f"second-{live.worker_name}"
    live.start_worker()
    assert live.get(run["api_url"]).json()["status"] == "running"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)

    # then the list, which reads no single run, shows it failed once the sweep came by
    def listed() -> str:
        listing = live.get("/api/v1/runs/").json()["results"]
        return next(item["status"] for item in listing if item["id"] == run["id"])

    _failed_within(listed, seconds=STALE_S + SWEEP_S + 3)
