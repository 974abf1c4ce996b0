"""Recording a run: events stored and published once, heartbeats and the stop check."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from playground import recording, streams
from playground.models import Run
from playground.recording import RunControl, TokenWriter, event_storable
from tests.playground.conftest import make_event


class Clock:
    """The time module as recording sees it: a monotonic clock the test moves, and
    sleeps noted rather than slept."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """Intervals of whole seconds, so that reaching one exactly is exact arithmetic."""
    clock = Clock()
    monkeypatch.setattr(recording, "time", clock)
    monkeypatch.setattr(recording, "FLUSH_EVERY_S", 1.0)
    monkeypatch.setattr(recording, "STOP_CHECK_EVERY_S", 2.0)
    monkeypatch.setattr(recording, "HEARTBEAT_EVERY_S", 4.0)
    return clock


def stored(run: Run) -> list[int]:
    return list(run.tokens.order_by("position").values_list("position", flat=True))


def published(client, run: Run) -> list[str]:
    return [entry_id.decode() for entry_id, _ in client.xrange(streams.stream_key(run.id))]


# -- event_storable


def test_nul_characters_are_shown_as_a_symbol_at_any_depth():
    event = {"text": "a\x00b", "top": [[1, "\x00", 0.5]], "pair": ("x\x00",), "n": 3, "none": None}

    assert event_storable(event) == {
        "text": "a\u2400b",
        "top": [[1, "\u2400", 0.5]],
        "pair": ["x\u2400"],
        "n": 3,
        "none": None,
    }


# -- TokenWriter


@pytest.mark.services
def test_events_are_stored_and_published_in_batches(run_factory, stream, clock):
    # given a writer that flushed a moment ago
    run = run_factory(status="running")
    writer = TokenWriter(run)
    writer.flush()

    # when two events come within the flush interval, then one after it
    writer.add(make_event(0))
    writer.add(make_event(1))
    assert stored(run) == [] and published(stream, run) == []
    clock.now += recording.FLUSH_EVERY_S
    writer.add(make_event(2))

    # then all three are stored and streamed, in order
    assert stored(run) == [0, 1, 2]
    assert published(stream, run) == ["1-0", "2-0", "3-0"]
    assert writer.last_position == 2
    assert writer.buffer == []


@pytest.mark.services
def test_a_full_batch_is_flushed_without_waiting(run_factory, stream, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)
    writer.flush()

    for position in range(recording.FLUSH_MAX - 1):
        writer.add(make_event(position))
    assert stored(run) == []
    writer.add(make_event(recording.FLUSH_MAX - 1))

    assert stored(run) == list(range(recording.FLUSH_MAX))
    assert len(published(stream, run)) == recording.FLUSH_MAX


def test_the_first_event_goes_out_at_once(run_factory, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)

    writer.add(make_event(0))

    assert stored(run) == [0]


def test_a_flush_waits_a_full_interval_from_the_last_one(run_factory, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)
    writer.add(make_event(0))  # flushed at once, at clock.now

    clock.now += recording.FLUSH_EVERY_S / 2
    writer.add(make_event(1))
    assert stored(run) == [0]

    writer.flush()
    assert stored(run) == [0, 1]
    assert writer.last_position == 1


def test_an_empty_flush_stores_nothing_but_restarts_the_interval(run_factory, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)

    clock.now += 5
    writer.flush()
    writer.add(make_event(0))

    assert stored(run) == []
    assert writer.last_position == -1


def test_a_writer_resumes_after_the_positions_already_stored(run_factory, clock):
    # given a run that a redelivered task resumes with positions 0-2 stored
    run = run_factory(tokens=3, status="running")

    writer = TokenWriter(run)

    # then the stored positions are never written again
    assert writer.last_position == 2
    for position in range(5):
        writer.add(make_event(position))
    writer.flush()
    assert stored(run) == [0, 1, 2, 3, 4]
    assert writer.last_position == 4


def test_a_replayed_position_is_dropped(run_factory, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)
    writer.add(make_event(0))
    clock.now += recording.FLUSH_EVERY_S
    writer.add(make_event(0) | {"text": "again"})
    writer.flush()

    assert list(run.tokens.values_list("text", flat=True)) == ["a"]


@pytest.mark.services
def test_an_event_with_nul_is_stored_and_published_with_the_symbol(run_factory, stream, clock):
    run = run_factory(status="running")
    writer = TokenWriter(run)

    writer.add(make_event(0) | {"text": "\x00"})

    token = run.tokens.get()
    assert token.text == "\u2400" and token.data["text"] == "\u2400"
    ((_, fields),) = stream.xrange(streams.stream_key(run.id))
    assert json.loads(fields[b"data"])["text"] == "\u2400"


def test_an_event_without_nul_is_stored_as_it_came(run_factory, clock):
    run = run_factory(status="running")
    event = make_event(0) | {"text": "\u2400", "loops": []}

    TokenWriter(run).add(event)

    assert run.tokens.get().data == event


# -- RunControl


def beats(run: Run):
    run.refresh_from_db()
    return run.heartbeat_at


def test_heartbeats_are_written_at_most_every_interval(run_factory, clock):
    # given a running run whose worker beat long ago
    long_ago = timezone.now() - timedelta(hours=1)
    run = run_factory(status="running", heartbeat_at=long_ago)
    control = RunControl(run)

    # then a beat within the interval writes nothing
    control.beat()
    assert beats(run) == long_ago

    # and one a full interval later does
    clock.now += recording.HEARTBEAT_EVERY_S
    control.beat()
    first = beats(run)
    assert first > long_ago

    # and the interval starts again from that beat
    Run.objects.filter(pk=run.pk).update(heartbeat_at=long_ago)
    clock.now += recording.HEARTBEAT_EVERY_S / 2
    control.beat()
    assert beats(run) == long_ago


def test_a_beat_is_written_for_that_run_only(run_factory, clock):
    long_ago = timezone.now() - timedelta(hours=1)
    run = run_factory(status="running", heartbeat_at=long_ago)
    other = run_factory(status="running", heartbeat_at=long_ago)
    control = RunControl(run)
    clock.now += recording.HEARTBEAT_EVERY_S

    control.beat()

    assert beats(run) > long_ago
    assert beats(other) == long_ago


def test_a_finished_run_gets_no_heartbeat(run_factory, clock):
    long_ago = timezone.now() - timedelta(hours=1)
    run = run_factory(status="failed", heartbeat_at=long_ago)
    control = RunControl(run)
    clock.now += recording.HEARTBEAT_EVERY_S

    control.beat()

    assert beats(run) == long_ago


def test_a_running_run_goes_on(run_factory, clock):
    control = RunControl(run_factory(status="running"))

    assert control.should_stop() is False
    assert control.stop_reason == ""


def test_a_cancel_request_stops_a_running_run(run_factory, clock):
    run = run_factory(status="running", cancel_requested=True)
    control = RunControl(run)

    assert control.should_stop() is True
    assert control.stop_reason == "cancelled"


def test_a_run_failed_meanwhile_stops_with_its_status(run_factory, clock):
    run = run_factory(status="running", cancel_requested=True)
    control = RunControl(run)
    Run.objects.filter(pk=run.pk).update(status="failed")

    assert control.should_stop() is True
    assert control.stop_reason == "failed"


def test_a_deleted_run_stops_as_failed(run_factory, clock):
    run = run_factory(status="running")
    control = RunControl(run)
    Run.objects.filter(pk=run.pk).delete()

    assert control.should_stop() is True
    assert control.stop_reason == "failed"


def test_the_stop_check_asks_the_database_at_most_every_interval(run_factory, clock):
    # given a check that found the run going on
    run = run_factory(status="running")
    control = RunControl(run)
    assert not control.should_stop()

    # when a cancel comes, the next check within the interval does not see it
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    clock.now += recording.STOP_CHECK_EVERY_S / 2
    assert not control.should_stop()

    # and the one a full interval after the last check does
    clock.now += recording.STOP_CHECK_EVERY_S / 2
    assert control.should_stop()


def test_the_stop_check_beats_too(run_factory, clock):
    long_ago = timezone.now() - timedelta(hours=1)
    run = run_factory(status="running", heartbeat_at=long_ago)
    control = RunControl(run)
    clock.now += recording.HEARTBEAT_EVERY_S

    control.should_stop()

    assert beats(run) > long_ago


def test_the_token_delay_is_slept_between_tokens(run_factory, clock, settings):
    settings.PLAYGROUND_TOKEN_DELAY_S = 0.25
    control = RunControl(run_factory(status="running"))

    control.should_stop()

    assert clock.slept == [0.25]


def test_no_token_delay_sleeps_not_at_all(run_factory, clock, settings):
    settings.PLAYGROUND_TOKEN_DELAY_S = 0
    control = RunControl(run_factory(status="running"))

    control.should_stop()

    assert clock.slept == []
