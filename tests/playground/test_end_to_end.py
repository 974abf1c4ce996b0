"""The full stack for real: uvicorn (ASGI), a Celery worker process, Redis and the
suite's database (PostgreSQL when DATABASE_URL names it, else a SQLite file the two
processes share). A prompt goes in through the API and comes back over SSE."""

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis

from tests.playground.conftest import PROMPT
from tests.playground.stack import read_run, suite_stack, token_view

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(redis_url, django_db_setup, django_db_blocker, tmp_path_factory):
    redis.Redis.from_url(redis_url).flushdb()
    workdir = tmp_path_factory.mktemp("full-stack")
    stack = suite_stack(workdir, redis_url=redis_url)
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture
def live(stack, transactional_db):
    """The stack, with the suite's tables emptied after the test (PostgreSQL)."""
    return stack


def test_prompt_streams_to_done_and_matches_the_engine(live, direct_events):
    # given
    params = {"max_new_tokens": 24, "temperature": 0.8, "top_p": 0.9, "seed": 7, "q": 0.6}

    # when
    run = live.submit(prompt=PROMPT, model="ouro-tiny", **params)
    first, streamed, end = read_run(live, run)

    # then
    assert first["data"]["id"] == run["id"] and first["data"]["trained_loops"] == 4
    assert end["event"] == "done" and end["data"]["status"] == "done"
    assert (
        end["data"]["stats"]["generated_tokens"]
        == len(streamed) - end["data"]["stats"]["prompt_tokens"]
    )
    stored = live.get(run["tokens_url"]).json()
    direct = direct_events(PROMPT, **params)
    assert token_view(streamed) == token_view(stored) == token_view(direct)
    assert [e["position"] for e in streamed] == list(range(len(direct)))
    assert live.get(run["api_url"]).json()["status"] == "done"


def test_a_late_viewer_gets_the_whole_run_from_the_store(live):
    # given
    run = live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=8)
    _, live_tokens, _ = read_run(live, run)

    # when
    _, replayed, end = read_run(live, run)

    # then
    assert replayed == live_tokens
    assert end["event"] == "done"


def test_many_viewers_of_one_run_each_get_every_event(live):
    # given
    run = live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=24)

    # when: ten viewers at once, each on its own connection
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: read_run(live, run), range(10)))

    # then
    stored = token_view(live.get(run["tokens_url"]).json())
    for _, tokens, end in results:
        assert end["event"] == "done"
        assert token_view(tokens) == stored


def test_resuming_with_last_event_id_loses_and_repeats_nothing(live):
    # given: a viewer that drops out after a few generated tokens
    run = live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=48)
    before = []
    for event in live.events(run):
        if event.get("event") == "token":
            before.append(event["data"])
            if event["data"]["phase"] == "generated" and len(before) > 16:
                break

    # when: it comes back with the last id it saw
    _, after, end = read_run(live, run, last_event_id=before[-1]["position"])

    # then
    assert end["event"] == "done"
    positions = [e["position"] for e in before + after]
    assert positions == list(range(len(positions)))
    assert token_view(before + after) == token_view(live.get(run["tokens_url"]).json())


def test_cancel_stops_the_run_between_tokens(live):
    # given
    run = live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=256)
    events = live.events(run)
    generated = 0
    for event in events:
        if event.get("event") == "token" and event["data"]["phase"] == "generated":
            generated += 1
            if generated == 3:
                break

    # when
    refused = live.post(run["cancel_url"])
    response = live.post(run["cancel_url"], headers={"X-Cancel-Token": run["cancel_token"]})
    _, rest, end = read_run(live, run, last_event_id=0)

    # then
    assert refused.status_code == 403
    assert response.status_code == 202
    assert end["event"] == "done" and end["data"]["status"] == "cancelled"
    assert end["data"]["stats"]["stopped"] == "stopped"
    assert sum(e["phase"] == "generated" for e in rest) < 256
    assert live.get(run["api_url"]).json()["status"] == "cancelled"


def test_a_flooding_client_gets_429_while_another_still_runs_to_done(live):
    # given: a client flooding from 127.0.0.1, another from 127.0.0.2 (its own address)
    flooder: list[dict[str, Any]] = []
    while len(flooder) < 10:
        response = live.submit_response(prompt=PROMPT, model="ouro-tiny", max_new_tokens=256)
        if response.status_code != 201:
            break
        flooder.append(response.json())

    # when
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
        created = live.submit_response(
            client=other, prompt=PROMPT, model="ouro-tiny", max_new_tokens=8
        )
    for run in flooder:  # the worker runs one at a time: the flooder's go first
        stop = live.post(run["cancel_url"], headers={"X-Cancel-Token": run["cancel_token"]})
        assert stop.status_code == 202
    _, tokens, end = read_run(live, created.json())

    # then
    assert response.status_code == 429, response.text
    assert "PLAYGROUND_VISITOR_ACTIVE" in response.json()["detail"]
    assert 1 <= len(flooder) <= 5  # PLAYGROUND_VISITOR_ACTIVE in the stack
    assert created.status_code == 201, created.text
    assert end["event"] == "done" and end["data"]["status"] == "done"
    assert sum(e["phase"] == "generated" for e in tokens) == 8


def _wait_for_generated(live, run, count: int = 2) -> None:
    for event in live.events(run):
        if event.get("event") == "token" and event["data"]["phase"] == "generated":
            count -= 1
            if count == 0:
                return


def test_a_worker_killed_mid_batch_leaves_every_run_failed_not_running(live):
    # given: three runs decoding together in the worker's batch
    runs = [
        live.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=256, q=q)
        for q in (0.5, 0.7, 1.0)
    ]
    for run in runs:
        _wait_for_generated(live, run)

    # when: the whole worker dies at once (SIGKILL, no handler runs)
    live.kill_worker()
    started = time.monotonic()
    ends = [read_run(live, run)[2] for run in runs]

    # then: once their heartbeats are stale, the viewers' sweep fails each with the reason
    try:
        for run, end in zip(runs, ends, strict=True):
            assert end["event"] == "error"
            assert "stopped responding" in end["data"]["error"]
            assert live.get(run["api_url"]).json()["status"] == "failed"
        assert time.monotonic() - started < 30
    finally:
        live.start_worker()


def test_runs_submitted_together_stream_what_they_stream_alone(live, direct_events):
    # given: four runs on different settings, submitted at once (one batch)
    settings_: list[dict[str, Any]] = [
        {"max_new_tokens": 12, "q": 0.6},
        {"max_new_tokens": 9, "exit_rule": "fixed", "fixed_loops": 2},
        {"max_new_tokens": 10, "temperature": 0.8, "seed": 4, "q": 0.8},
        {"max_new_tokens": 7, "kv_policy": "recompute-kv", "q": 0.5},
    ]
    runs = [live.submit(prompt=PROMPT, model="ouro-tiny", **params) for params in settings_]

    # when
    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(lambda run: read_run(live, run), runs))

    # then
    for params, (_, streamed, end) in zip(settings_, results, strict=True):
        assert end["data"]["status"] == "done"
        assert token_view(streamed) == token_view(direct_events(PROMPT, **params))
