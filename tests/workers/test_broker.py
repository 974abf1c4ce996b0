"""A worker survives losing the broker with runs in flight: kombu's Redis transport as we
patch it (``workers.broker.RedisTransport``), and the messages kombu gives back on the
way. The real outages are in tests/playground/test_redis_loss.py."""

import os
import subprocess
import sys
from typing import Any
from unittest import mock

import pytest
from kombu import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from playground import recording
from workers import execution
from workers.broker import RedisTransport

pytestmark = pytest.mark.services


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://broker:6379/0", "workers.broker:RedisTransport"),
        ("rediss://broker:6380/0?ssl_cert_reqs=required", "workers.broker:RedisTransport"),
        ("sqlite:///var/broker.sqlite3", "workers.broker:Transport"),
        ("amqp://broker//", "None"),
    ],
)
def test_the_broker_url_picks_our_transport(url, transport):
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import loopatlas.settings.base as s; print(s.CELERY_BROKER_TRANSPORT)",
        ],
        env=os.environ | {"CELERY_BROKER_URL": url, "DEBUG": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == transport


def test_a_channel_of_a_released_connection_raises_the_connection_error_kombu_ignores(
    redis_url,
):
    # given a channel whose connection was released, as the worker's consumer releases a
    # lost one (kombu drops the transport's client) before closing the channel again
    connection = Connection(redis_url, transport=RedisTransport)
    channel: Any = connection.default_channel  # a RedisChannel (the stubs know StdChannel)
    connection.transport.client = None

    # when the channel builds a pool again (to give unacknowledged messages back)
    # then it raises what kombu's closing code ignores, not AttributeError
    with pytest.raises(RedisConnectionError):
        channel._connparams()


@pytest.mark.django_db
def test_a_message_redelivered_while_this_process_runs_it_is_skipped(run_factory):
    # given a run this worker is generating, whose message comes back meanwhile (kombu
    # gives unacknowledged messages back when the broker connection drops)
    run = run_factory(params={"max_new_tokens": 4, "q": 0.7, "loops": None, "seed": 0})
    redelivered: list[object] = []
    add = recording.TokenWriter.add

    def add_then_redeliver(writer, event):
        add(writer, event)
        if not redelivered:
            redelivered.append(execution.run_execute(run_id=run.id, worker="w1"))

    # when
    with mock.patch.object(recording.TokenWriter, "add", add_then_redeliver):
        finished = execution.run_execute(run_id=run.id, worker="w1")

    # then the second delivery was skipped and the run went on to its end
    assert redelivered == [None]
    assert finished is not None and (finished.status, finished.error) == ("done", "")
    assert finished.attempts == 1
