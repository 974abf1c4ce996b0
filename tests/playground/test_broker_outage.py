"""A broker that cannot be reached: a submit answers 503 with a clear message, the run is
stored failed with the reason, and it holds no queue slot. The web server runs for real
(uvicorn) with its broker URL on a closed port; Redis itself (cache, streams) stays up."""

import pytest
import redis

from tests.playground.conftest import PROMPT
from tests.playground.stack import free_port, suite_stack

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def web_without_broker(redis_url, transactional_db, tmp_path):
    redis.Redis.from_url(redis_url).flushdb()
    stack = suite_stack(tmp_path, redis_url=redis_url)
    stack.env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens
    try:
        stack.start_web()
        yield stack
    finally:
        stack.stop()


def test_a_submit_with_the_broker_down_is_a_503_and_leaves_no_run_queued(web_without_broker):
    # given
    web = web_without_broker
    limit = int(web.env["PLAYGROUND_VISITOR_ACTIVE"])

    # when: more submits than the visitor's active limit
    responses = [
        web.submit_response(prompt=PROMPT, model="ouro-tiny", max_new_tokens=4)
        for _ in range(limit + 1)
    ]

    # then: every one is a 503 (none a 429: no failed submit holds a slot)
    assert [r.status_code for r in responses] == [503] * (limit + 1)
    assert "run queue is unreachable" in responses[0].json()["detail"]
    runs = web.get("/api/v1/runs/").json()["results"]
    assert len(runs) == limit + 1
    assert {run["status"] for run in runs} == {"failed"}
    # and the public reason names no broker address (that is in the web server's log)
    assert {run["error"] for run in runs} == {"the run queue (broker) could not be reached"}


@pytest.mark.django_db(transaction=True)
def test_the_page_answers_503_and_the_run_is_failed_with_the_reason(client):
    # given a broker that refuses the publish (the boundary: kombu's own error)
    from unittest import mock

    from kombu.exceptions import OperationalError

    from playground.models import Run
    from tests.playground.test_pages import _form
    from workers import celery_app

    refused = OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    # when
    with mock.patch.object(celery_app, "send_task", side_effect=refused):
        response = client.post("/playground/", _form())

    # then
    assert response.status_code == 503
    assert "run queue is unreachable" in response.content.decode()
    run = Run.objects.get()
    assert run.status == Run.Status.FAILED
    assert run.error == "the run queue (broker) could not be reached"  # no address: the log
