"""The worker side of a run: claim it, hand it to the process's batch, store and publish
its events, and end it ``done``, ``cancelled`` or ``failed`` (the task body).

The web app never imports this module: imports flow workers -> playground -> kernels.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from loopatlas.outage import DATABASE_ERRORS, database_unreachable
from playground import selectors
from playground.branching import BRANCH_OF
from playground.checkpoints import model_get
from playground.models import Run, RunToken
from playground.recording import RunControl, TokenWriter, waiting_out_outage
from playground.services import ModelUnavailable, run_end_publish
from playground.siblings import TEXT_OF

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kernels.checkpoint import LoadedModel
    from kernels.generate import GenerationStream
    from kernels.report import TokenEvent
    from kernels.request import GenerationParams
    from workers.batching import RunHandle

logger = logging.getLogger(__name__)


# Runs this process is generating. A worker whose broker connection drops gives their
# unacknowledged messages back to the queue (kombu does, when it can reach the broker),
# and takes them again on reconnecting: those are skipped, not taken for a lost attempt.
_IN_FLIGHT: set[uuid.UUID] = set()


@dataclass
class Claim:
    run: Run | None  # the run to generate; None: skip the message
    reason: str = ""
    ended: Run | None = None  # a run the claim itself ended, whose end is to publish


def run_claim(*, run_id: uuid.UUID | str, worker: str) -> Claim:
    """Take a queued run for this worker; anything else is a redelivery to skip.

    The common case, a queued run nobody has stopped, is one conditional UPDATE and a
    read (a burst of runs claims on a busy worker: each round trip waits for a core);
    anything else is decided under the row's lock (``_claim_locked``).
    """
    if _take(run_id=run_id, worker=worker):
        return Claim(Run.objects.get(pk=run_id))
    return _claim_locked(run_id=run_id, worker=worker)


def _take(*, run_id: uuid.UUID | str, worker: str) -> bool:
    """Mark the run running on ``worker`` if it is queued and nobody has stopped it."""
    now = timezone.now()
    queued = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, cancel_requested=False)
    taken = queued.update(
        status=Run.Status.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker=worker,
        attempts=F("attempts") + 1,
    )
    return bool(taken)


@transaction.atomic
def _claim_locked(*, run_id: uuid.UUID | str, worker: str) -> Claim:
    """``run_claim`` for a run that was not simply queued when it looked.

    A run found ``running`` is skipped if this process is generating it (its message was
    given back when the broker connection dropped); otherwise it was started by an attempt
    that did not finish (its worker died, and the broker redelivered the message): it is
    failed rather than restarted, since what killed that worker may kill this one.
    """
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        return Claim(None, "no such run")
    if run.finished:
        return Claim(None, f"already {run.status}")
    now = timezone.now()
    if run.status == Run.Status.RUNNING:
        if run.id in _IN_FLIGHT:
            return Claim(None, "still running in this process")
        if not selectors.run_is_stale(run=run) and run.worker != worker:
            return Claim(None, f"running on {run.worker}")
        logger.warning("run %s: its worker %s was lost mid-run", run.id, run.worker or "none")
        run.status, run.finished_at = Run.Status.FAILED, now
        run.error = "its worker was lost mid-run"
        run.save(update_fields=["status", "finished_at", "error"])
        return Claim(None, "an earlier attempt was lost", ended=run)
    if run.cancel_requested:
        run.status, run.finished_at = Run.Status.CANCELLED, now
        run.save(update_fields=["status", "finished_at"])
        return Claim(None, "cancelled before it started", ended=run)
    _take(run_id=run_id, worker=worker)  # queued, and locked by this transaction
    run.refresh_from_db()
    return Claim(run)


class InvalidParams(ValueError):
    """The run's stored parameters do not validate; the message says which and why."""


def generation_params(run: Run) -> GenerationParams:
    """The engine's parameters for ``run`` (``extrapolate`` is the API's, not the engine's)."""
    from kernels.request import GenerationParams

    ours = ("extrapolate", TEXT_OF, BRANCH_OF)  # the API's and the playground's, not the engine's
    values = {key: value for key, value in run.params.items() if key not in ours}
    try:
        return GenerationParams(**values).validate()
    except ValueError as exc:
        raise InvalidParams(str(exc)) from exc


def run_execute(*, run_id: uuid.UUID | str, worker: str = "") -> Run | None:
    """Generate the run in this process (the worker's task body); idempotent.

    Returns the finished run, or None when the message was a redelivery to skip.
    """
    claim = run_claim(run_id=run_id, worker=worker)
    if claim.run is None:
        logger.info("run %s skipped: %s", run_id, claim.reason)
        if claim.ended is not None:
            run_end_publish(claim.ended)
        return None
    _IN_FLIGHT.add(claim.run.id)
    try:
        return _generate(claim.run)
    finally:
        _IN_FLIGHT.discard(claim.run.id)


def _generate(run: Run) -> Run:
    """``run_execute`` for a run this process has claimed."""
    from workers.batching import RunTimeLimitExceeded, batch_submit, torch_threads_pin
    from workers.resident import resident_model

    writer, control = TokenWriter(run), RunControl(run)
    handle: RunHandle | _ForcedRun | None = None
    try:
        model = model_get(name=run.model)
        if model is None or not model.available:
            raise ModelUnavailable(model.problem if model else f"no model named {run.model!r}")
        params = generation_params(run)
        torch_threads_pin(settings.PLAYGROUND_TORCH_THREADS)  # this task thread's own
        loaded = resident_model(model.path)
        control.beat()  # the claim's heartbeat stands unless loading the model took long
        if run.params.get(TEXT_OF):
            handle = _forced(loaded, run, params)
        else:
            handle = batch_submit(
                loaded,
                run.id,
                run.prompt,
                params,
                max_rows=settings.PLAYGROUND_BATCH,
                torch_threads=settings.PLAYGROUND_TORCH_THREADS,
                prefill_chunk=settings.PLAYGROUND_PREFILL_CHUNK,
                time_limit_s=settings.PLAYGROUND_SOFT_TIME_LIMIT_S,
            )
        first = True
        for event in handle:
            if control.stop_reason:  # stopped: the rest of the batch's step is not kept
                continue
            writer.add(event.to_dict())
            if event.phase == RunToken.Phase.PROMPT:
                control.beat()
                continue
            if first:  # what the visitor waits for goes out now, not with the next batch
                writer.flush()
                first = False
            if control.should_stop():
                handle.cancel()
        writer.flush()
    except Exception as exc:  # the run records why it failed; the worker goes on
        if handle is not None:
            handle.cancel()  # the batch's other runs go on without it
        if not isinstance(exc, InvalidParams | ModelUnavailable | RunTimeLimitExceeded):
            logger.exception("run %s failed", run.id)  # the detail its public reason omits
        try:
            writer.flush()  # what was generated before the failure stays viewable
        except Exception:
            logger.exception("run %s: could not store its last tokens", run.id)
        _finish_failed(run, exc, writer.last_position)
        return run
    return _finish(run, handle.summary or {}, control.stop_reason, writer.last_position)


class _ForcedRun:
    """A "same text" sibling's events (``kernels.teacher``): one prefill over the text of
    the run it is compared with, in this thread, handed out as a batch's run is."""

    def __init__(self, stream: GenerationStream) -> None:
        self.stream, self.cancelled = stream, False

    def __iter__(self) -> Iterator[TokenEvent]:
        for event in self.stream:
            if self.cancelled:
                return
            yield event

    def cancel(self) -> None:
        self.cancelled = True

    @property
    def summary(self) -> dict[str, Any] | None:
        return self.stream.summary


def _forced(loaded: LoadedModel, run: Run, params: GenerationParams) -> _ForcedRun:
    from kernels.teacher import teacher_forced_stream

    source = Run.objects.filter(pk=run.params[TEXT_OF]).first()
    tokens = list(selectors.run_tokens(run=source)) if source is not None else []
    if not tokens:
        raise InvalidParams("the run whose text this run scores has no stored tokens")
    prompt = sum(token.phase == RunToken.Phase.PROMPT for token in tokens)
    ids = [token.token_id for token in tokens]
    return _ForcedRun(teacher_forced_stream(loaded, ids, prompt, params))


def _finish(run: Run, stats: dict[str, Any], stop_reason: str, last_position: int) -> Run:
    if stop_reason and stop_reason != Run.Status.CANCELLED:
        run.refresh_from_db()  # failed meanwhile: that outcome stands
        return run
    status = Run.Status.CANCELLED if stop_reason else Run.Status.DONE
    if stop_reason and "prompt_tokens" in stats:
        # The batch may have run past the stop before this thread read it; the run's
        # summary states what the run kept: stopped, after the tokens it stored.
        kept = max(last_position + 1 - stats["prompt_tokens"], 0)
        stats = stats | {"stopped": "stopped", "generated_tokens": kept}
    running = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING)
    now = timezone.now()
    ending = {"status": status, "stats": stats, "finished_at": now, "heartbeat_at": now}
    waiting_out_outage(lambda: running.update(**ending), run.id)
    run.refresh_from_db()
    run_end_publish(run, last_position=last_position)
    return run


def _failure_reason(exc: BaseException) -> str:
    """What a run's visitors are told it failed of: the messages written for them (a bad
    parameter, an unavailable model, a time limit), else what failed with no addresses,
    host names or exception text (those are in the worker's log)."""
    from celery.exceptions import SoftTimeLimitExceeded

    from workers.batching import RunTimeLimitExceeded

    if isinstance(exc, SoftTimeLimitExceeded):
        return f"it ran past the {settings.PLAYGROUND_SOFT_TIME_LIMIT_S} s time limit"
    if isinstance(exc, RunTimeLimitExceeded | InvalidParams | ModelUnavailable):
        return str(exc)
    if isinstance(exc, DATABASE_ERRORS) and database_unreachable():
        return f"the database was unreachable for {settings.PLAYGROUND_STALE_AFTER_S} s"
    return f"the worker hit an error: {type(exc).__name__}"


def _finish_failed(run: Run, exc: BaseException, last_position: int) -> None:
    reason = _failure_reason(exc)
    running = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING)
    ending = {"status": Run.Status.FAILED, "error": reason, "finished_at": timezone.now()}
    waiting_out_outage(lambda: running.update(**ending), run.id)
    run.refresh_from_db()
    run_end_publish(run, last_position=last_position)
