"""How a worker records a run as it generates: events stored and published in order
(never a position twice), and between tokens a heartbeat and the stop check. Used by
``workers.execution.run_execute``.

Per-token costs are bounded by time, not paid per token: events are written and
published in batches at most FLUSH_EVERY_S apart (a model slower than that gets each
token out at once; a fast one, or the prompt burst, gets one INSERT and one Redis round
trip per batch), and the database is asked about Stop at most every STOP_CHECK_EVERY_S.
A database restart is waited out (``waiting_out_outage``): the run goes on once the
database answers again.
"""

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from loopatlas.outage import through_outage
from playground import streams
from playground.models import Run, RunToken

HEARTBEAT_EVERY_S = 1.0
# A batch of 8 runs writing each token in its own transaction, and asking about Stop as
# often, took CPU from the steps and the web on a small machine; ten writes a second per
# run still stream smoothly (a run's first generated token is written at once).
FLUSH_EVERY_S = 0.1
FLUSH_MAX = 64
STOP_CHECK_EVERY_S = 0.25

NUL_SYMBOL = "\u2400"  # ␀: PostgreSQL text and jsonb cannot hold U+0000


def event_storable(value: Any) -> Any:
    """The event as stored and streamed: every NUL in its texts shown as ␀ (U+2400)."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_SYMBOL)
    if isinstance(value, dict):
        return {key: event_storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [event_storable(item) for item in value]
    return value


def waiting_out_outage[T](action: Callable[[], T], run_id: uuid.UUID) -> T:
    """``action()`` for a run, waiting out a database restart for as long as the run may
    go without a heartbeat (PLAYGROUND_STALE_AFTER_S): past that it is failed anyway."""
    return through_outage(action, budget_s=settings.PLAYGROUND_STALE_AFTER_S, what=f"run {run_id}")


class TokenWriter:
    """Stores events and publishes them, in position order, in time-bounded batches."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.stored = set(RunToken.objects.filter(run=run).values_list("position", flat=True))
        self.buffer: list[tuple[dict[str, Any], str]] = []  # (event, its JSON)
        self.last_flush = 0.0
        self.last_position = max(self.stored, default=-1)

    def add(self, event: dict[str, Any]) -> None:
        if event["position"] in self.stored:  # a replay: never stored or streamed twice
            return
        payload = json.dumps(event)
        if "\\u0000" in payload:
            event = event_storable(event)
            payload = json.dumps(event)
        self.buffer.append((event, payload))
        if len(self.buffer) >= FLUSH_MAX or time.monotonic() - self.last_flush >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        if not self.buffer:
            return
        rows = [RunToken.from_event(self.run, event) for event, _ in self.buffer]
        waiting_out_outage(lambda: RunToken.objects.bulk_create(rows), self.run.id)
        streams.publish_encoded(
            run_id=self.run.id, entries=[(event["position"], data) for event, data in self.buffer]
        )
        self.stored.update(event["position"] for event, _ in self.buffer)
        self.last_position = max(self.last_position, self.buffer[-1][0]["position"])
        self.buffer = []


class RunControl:
    """Between tokens: heartbeat (at most every HEARTBEAT_EVERY_S) and the stop check."""

    def __init__(self, run: Run) -> None:
        self.run_id, self.last_beat, self.last_check = run.id, time.monotonic(), 0.0
        self.stop_reason = ""

    def should_stop(self) -> bool:
        if settings.PLAYGROUND_TOKEN_DELAY_S:
            time.sleep(settings.PLAYGROUND_TOKEN_DELAY_S)
        self.beat()
        if time.monotonic() - self.last_check < STOP_CHECK_EVERY_S:
            return False
        self.last_check = time.monotonic()
        state = Run.objects.filter(pk=self.run_id).values_list("status", "cancel_requested")
        found = waiting_out_outage(state.first, self.run_id)
        status, cancel = found or (Run.Status.FAILED, False)
        if status != Run.Status.RUNNING:
            self.stop_reason = status  # failed meanwhile (a sweep): stop writing
        elif cancel:
            self.stop_reason = Run.Status.CANCELLED
        return bool(self.stop_reason)

    def beat(self) -> None:
        if time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_S:
            running = Run.objects.filter(pk=self.run_id, status=Run.Status.RUNNING)
            waiting_out_outage(lambda: running.update(heartbeat_at=timezone.now()), self.run_id)
            self.last_beat = time.monotonic()
