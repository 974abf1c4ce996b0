"""How a worker records a run as it generates: events stored and published in order
(batched during the prompt burst, never a position twice), and between tokens a
heartbeat and the stop check. Used by ``services.run_execute``."""

import time
from typing import Any

from django.conf import settings
from django.utils import timezone

from playground import streams
from playground.models import Run, RunToken

HEARTBEAT_EVERY_S = 1.0
FLUSH_EVERY_S = 0.05  # prompt events are written in batches at most this old
FLUSH_MAX = 64

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


class TokenWriter:
    """Persists events (batched during the prompt burst) and publishes them in order."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.stored = set(RunToken.objects.filter(run=run).values_list("position", flat=True))
        self.buffer: list[dict[str, Any]] = []
        self.first_buffered = 0.0
        self.last_position = max(self.stored, default=-1)

    def add(self, event: dict[str, Any]) -> None:
        if event["position"] in self.stored:  # a replay: never stored or streamed twice
            return
        event = event_storable(event)
        if not self.buffer:
            self.first_buffered = time.monotonic()
        self.buffer.append(event)
        if (
            event["phase"] == RunToken.Phase.GENERATED
            or len(self.buffer) >= FLUSH_MAX
            or time.monotonic() - self.first_buffered >= FLUSH_EVERY_S
        ):
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        RunToken.objects.bulk_create(
            [
                RunToken(
                    run=self.run,
                    position=event["position"],
                    phase=event["phase"],
                    token_id=event["token_id"],
                    text=event["text"],
                    exit_loop=event["exit_loop"],
                    loops_computed=event["loops_computed"],
                    data=event,
                )
                for event in self.buffer
            ]
        )
        streams.publish_tokens(run_id=self.run.id, events=self.buffer)
        self.stored.update(event["position"] for event in self.buffer)
        self.last_position = max(self.last_position, self.buffer[-1]["position"])
        self.buffer = []


class RunControl:
    """Between tokens: heartbeat (at most every HEARTBEAT_EVERY_S) and the stop check."""

    def __init__(self, run: Run) -> None:
        self.run_id, self.last_beat = run.id, time.monotonic()
        self.stop_reason = ""

    def should_stop(self) -> bool:
        if settings.PLAYGROUND_TOKEN_DELAY_S:
            time.sleep(settings.PLAYGROUND_TOKEN_DELAY_S)
        self.beat()
        state = Run.objects.filter(pk=self.run_id).values_list("status", "cancel_requested")
        status, cancel = state.first() or (Run.Status.FAILED, False)
        if status != Run.Status.RUNNING:
            self.stop_reason = status  # failed meanwhile (a sweep): stop writing
        elif cancel:
            self.stop_reason = Run.Status.CANCELLED
        return bool(self.stop_reason)

    def beat(self, force: bool = False) -> None:
        if force or time.monotonic() - self.last_beat >= HEARTBEAT_EVERY_S:
            Run.objects.filter(pk=self.run_id, status=Run.Status.RUNNING).update(
                heartbeat_at=timezone.now()
            )
            self.last_beat = time.monotonic()
