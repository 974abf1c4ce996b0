"""Redis killed with runs in flight, as a real stack meets it (uvicorn and a Celery worker
process on a redis-server of this test's own, never the shared one): the worker lives on,
every run in flight ends ``done`` or ``failed`` with a reason, and a run submitted once
Redis is back completes. (kombu 5.7 used to end the worker here: workers/broker.py.) With
Redis up and only the connections dropped, every run ends ``done``."""

import time

import httpx
import pytest
import redis

from benchmarks.soak import RedisServer
from tests.playground.conftest import PROMPT
from tests.playground.stack import Stack, suite_stack

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def stack_on_own_redis(redis_url, transactional_db, tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    stack = suite_stack(tmp_path, redis_url=server.url)
    stack.env["PLAYGROUND_TOKEN_DELAY_S"] = "0.05"  # the runs are still going when it dies
    try:
        yield stack.start(), server
    finally:
        stack.stop()
        if server.process is not None and server.process.poll() is None:
            server.kill()


def _run(stack: Stack, run: dict) -> dict:
    return stack.get(run["api_url"]).json()


def _until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.2)


def _generating(stack: Stack, run: dict) -> bool:
    tokens = httpx.get(stack.base + run["tokens_url"], timeout=10).json()
    return any(token["phase"] == "generated" for token in tokens)


def _killed(server: RedisServer) -> None:
    """Redis dies (SIGKILL: its queues and unacknowledged messages are gone) and is started
    again on the same port a few seconds later."""
    server.kill()
    time.sleep(3)
    server.start()


def _connections_dropped(server: RedisServer) -> None:
    """Redis ends every client's connection and stays up: kombu gives the worker's
    unacknowledged messages back, and the worker takes them again on reconnecting."""
    redis.Redis.from_url(server.url).client_kill_filter(_type="normal", skipme=True)


@pytest.mark.parametrize(
    ("outage", "ends"),
    [(_killed, {"done", "failed"}), (_connections_dropped, {"done"})],
    ids=["killed", "connections-dropped"],
)
def test_a_redis_outage_with_runs_in_flight_ends_every_run_and_the_worker_lives_on(
    stack_on_own_redis, outage, ends
):
    # given three runs decoding in the worker's batch
    stack, server = stack_on_own_redis
    runs = [stack.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=96) for _ in range(3)]
    _until(lambda: all(_generating(stack, run) for run in runs), 30, "the runs generating")

    # when
    outage(server)

    # then every run in flight ends, done (or failed with a reason, where Redis lost them)
    _until(lambda: all(_run(stack, run)["finished_at"] for run in runs), 40, "the runs ending")
    for run in map(lambda run: _run(stack, run), runs):
        assert run["status"] in ends, run
        assert run["status"] == "done" or run["error"], run
    # and the worker is still there, and takes a run submitted now to its end
    assert stack.worker is not None and stack.worker.poll() is None, stack.log("worker")[-3000:]
    after = stack.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=4)
    _until(lambda: _run(stack, after)["status"] == "done", 30, "the new run done")
    assert "Unrecoverable error" not in stack.log("worker")
