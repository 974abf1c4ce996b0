"""The embedded mode end to end, as ``make run`` starts it: no Redis, a SQLite database,
the worker beside the web server with a SQLite broker file, events through the database."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.playground.conftest import PROMPT
from tests.playground.stack import Stack, read_run, token_view

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("embedded")
    stack = Stack(workdir, database_url=f"sqlite:///{workdir / 'db.sqlite3'}")
    stack.manage("migrate", "--noinput")
    try:
        yield stack.start()
    finally:
        stack.stop()


def test_the_embedded_stack_uses_no_redis(embedded):
    # then
    assert "REDIS_URL" not in embedded.env
    assert (embedded.workdir / "celery-broker.sqlite3").exists()


def test_prompt_streams_to_done_and_matches_the_engine(embedded, direct_events):
    # given
    params = {"max_new_tokens": 16, "seed": 3, "temperature": 0.7, "top_p": 0.95}

    # when
    run = embedded.submit(prompt=PROMPT, model="ouro-tiny", **params)
    first, streamed, end = read_run(embedded, run)

    # then
    assert first["data"]["status"] in ("queued", "running")
    assert end["event"] == "done" and end["data"]["status"] == "done"
    stored = embedded.get(run["tokens_url"]).json()
    assert token_view(streamed) == token_view(stored) == token_view(direct_events(PROMPT, **params))


def test_many_viewers_of_one_run_each_get_every_event(embedded):
    # given
    run = embedded.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=16)

    # when
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: read_run(embedded, run), range(10)))

    # then
    stored = token_view(embedded.get(run["tokens_url"]).json())
    assert all(token_view(tokens) == stored for _, tokens, _ in results)
    assert all(end["event"] == "done" for _, _, end in results)


def test_resuming_with_last_event_id_loses_and_repeats_nothing(embedded):
    # given
    run = embedded.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=32)
    before = []
    for event in embedded.events(run):
        if event.get("event") == "token":
            before.append(event["data"])
            if event["data"]["phase"] == "generated" and len(before) > 16:
                break

    # when
    _, after, end = read_run(embedded, run, last_event_id=before[-1]["position"])

    # then
    assert end["event"] == "done"
    positions = [e["position"] for e in before + after]
    assert positions == list(range(len(positions)))
    assert token_view(before + after) == token_view(embedded.get(run["tokens_url"]).json())


def test_cancel_stops_the_run_between_tokens(embedded):
    # given
    run = embedded.submit(prompt=PROMPT, model="ouro-tiny", max_new_tokens=256)
    for event in embedded.events(run):
        if event.get("event") == "token" and event["data"]["phase"] == "generated":
            break

    # when
    stop = embedded.post(run["cancel_url"], headers={"X-Cancel-Token": run["cancel_token"]})
    assert stop.status_code == 202
    _, _, end = read_run(embedded, run)

    # then
    assert end["data"]["status"] == "cancelled", end
    assert embedded.get(run["api_url"]).json()["status"] == "cancelled"
