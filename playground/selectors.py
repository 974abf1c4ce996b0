"""Reads of runs and their tokens (sync for the API and the worker, async for SSE)."""

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact
from django.utils import timezone

from playground.models import Run, RunToken

TOKEN_FIELDS = ("position", "phase", "token_id", "text", "exit_loop", "loops_computed")


def run_list() -> QuerySet[Run]:
    """Runs, most recent first (those whose worker died are failed by the workers' sweep,
    ``workers.sweep``, and by ``run_get``)."""
    return Run.objects.order_by("-created_at")


def run_get(*, run_id: uuid.UUID | str) -> Run | None:
    """The run as it stands: one whose worker went quiet past PLAYGROUND_STALE_AFTER_S is
    failed first, so no reader sees it ``running`` past that (the workers' sweep may not
    have come yet, or no worker is left to sweep)."""
    run = Run.objects.filter(pk=run_id).first()
    if run is not None and run_is_stale(run=run):
        from playground.services import run_fail_stale  # services reads through this module

        run_fail_stale()
        run.refresh_from_db()
    return run


@dataclass(frozen=True)
class ActiveCounts:
    """What a submit's limits count among runs queued or running."""

    total: int  # site-wide (PLAYGROUND_MAX_QUEUED)
    slots: int  # the visitor's active-run slots in use (PLAYGROUND_VISITOR_ACTIVE)
    address_slots: int  # the client address's slots in use (PLAYGROUND_VISITOR_ACTIVE too)
    siblings: int  # the visitor's or address's siblings of the run being joined


def run_active_counts(
    *, visitor: str = "", address: str = "", joining: Run | None = None
) -> ActiveCounts:
    """The counts a submit checks, in one query (a submit is on every visitor's path).

    A run alone holds one slot of its visitor and of its address, and a run with the
    siblings started to compare with it (``Run.compare_of``) hold one between them.
    ``joining`` is a run whose group is being joined: its own slot is not counted, its
    active siblings are. The address counts page sessions and API calls together, so a
    fresh cookie adds no slot.
    """
    slot = Coalesce("compare_of_id", "id")
    nobody = Q(pk__in=[])
    mine = Q(visitor=visitor) if visitor else nobody
    here = Q(address=address) if address else nobody
    others = ~Q(Exact(slot, joining.pk)) if joining is not None else Q()
    joined = Q(compare_of=joining) if joining is not None else nobody
    counts = Run.objects.filter(status__in=Run.ACTIVE).aggregate(
        total=Count("pk"),
        slots=Count(slot, distinct=True, filter=mine & others),
        address_slots=Count(slot, distinct=True, filter=here & others),
        siblings=Count("pk", filter=(mine | here) & joined),
    )
    return ActiveCounts(**counts)


def run_stale_list(*, now=None) -> QuerySet[Run]:
    """Runs to give up on: running ones whose worker wrote no heartbeat for
    PLAYGROUND_STALE_AFTER_S, and queued ones no worker took for PLAYGROUND_QUEUED_TIMEOUT_S."""
    now = now or timezone.now()
    beat = now - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S)
    queued = now - timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S)
    return Run.objects.filter(
        Q(status=Run.Status.RUNNING, heartbeat_at__lt=beat)
        | Q(status=Run.Status.QUEUED, created_at__lt=queued)
    )


def run_is_stale(*, run: Run, now=None) -> bool:
    """``run_stale_list``'s test for one run already in hand."""
    now = now or timezone.now()
    if run.status == Run.Status.RUNNING and run.heartbeat_at is not None:
        return now - run.heartbeat_at > timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S)
    if run.status == Run.Status.QUEUED:
        return now - run.created_at > timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S)
    return False


SPECULATION = ("speculate_loops", "speculate_tokens")


def run_plain_twin(*, run: Run) -> Run | None:
    """The latest finished run of ``run``'s model, prompt and settings decoded without
    self-speculation (what a speculative run's speed-up is measured against)."""
    settings = {k: v for k, v in run.params.items() if k not in SPECULATION}
    candidates = (
        Run.objects.filter(model=run.model, prompt=run.prompt, status=Run.Status.DONE)
        .exclude(pk=run.pk)
        .order_by("-created_at")[:20]
    )
    return next(
        (
            other
            for other in candidates
            if not other.params.get("speculate_loops")
            and {k: v for k, v in other.params.items() if k not in SPECULATION} == settings
        ),
        None,
    )


def run_tokens(*, run: Run, after: int = -1) -> QuerySet[RunToken]:
    """The run's token records after position ``after``, in position order."""
    return RunToken.objects.filter(run=run, position__gt=after).order_by("position")


def run_token_dicts(*, run: Run) -> list[dict]:
    """The token records as the API exports them: the columns plus the full event."""
    return [
        {field: getattr(token, field) for field in TOKEN_FIELDS} | {"loops": token.data["loops"]}
        for token in run_tokens(run=run)
    ]


def run_token_rows(*, run: Run) -> Iterator[list]:
    """CSV rows: a header, then one row per token with the cumulative exit probability at
    each loop up to the most any token could use (empty where a loop was not computed)."""
    depth = max(run.params.get("loops") or run.trained_loops or 0, 1)
    tokens = list(run_tokens(run=run))
    depth = max([depth, *(token.loops_computed for token in tokens)])
    yield [*TOKEN_FIELDS, *(f"cumulative_{t}" for t in range(1, depth + 1))]
    for token in tokens:
        cumulative = [loop["cumulative"] for loop in token.data.get("loops", [])]
        cumulative += [""] * (depth - len(cumulative))
        yield [*(getattr(token, field) for field in TOKEN_FIELDS), *cumulative]


def run_events_after(*, run_id: uuid.UUID | str, after: int, limit: int = 500) -> list[dict]:
    """Stored token events after position ``after`` (at most ``limit``), in order."""
    rows = RunToken.objects.filter(run_id=run_id, position__gt=after).order_by("position")
    return list(rows.values_list("data", flat=True)[:limit])


def run_progress(
    *, run_id: uuid.UUID | str, after: int, limit: int = 500
) -> tuple[Run | None, list[dict]]:
    """The run, then its stored events after ``after``, read in that order: when the run
    reads as finished, every one of its events is in the list (up to ``limit``)."""
    run = run_get(run_id=run_id)
    if run is None:  # a made-up id costs one query
        return None, []
    return run, run_events_after(run_id=run_id, after=after, limit=limit)
