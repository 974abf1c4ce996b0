"""Everything the web side writes of runs: submit, cancel and fail.

A run's life: ``run_submit`` validates and creates it ``queued`` and enqueues the Celery
task once the transaction commits; the worker's ``workers.execution.run_execute`` claims
it (``running``), streams the engine's events into ``RunToken`` rows and the run's Redis
stream, and ends it ``done``, ``cancelled`` or ``failed``. A worker that dies leaves a
stale heartbeat: ``run_fail_stale`` (run by every worker every few seconds and at its
startup, by readers and viewers of the run, and by a submit that a limit would otherwise
refuse) marks such runs failed with the reason, so none stays ``running``.
"""

from __future__ import annotations

import hmac
import logging
import uuid
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from kernels.params import RunParams
from loopatlas.locks import transaction_serialised
from playground import selectors, streams
from playground.branching import BRANCH_OF, BranchError, branch_make
from playground.checkpoints import ModelInfo, default_model_name, model_get, prompt_token_count
from playground.models import Run, RunToken
from playground.siblings import (
    COMPARE_SIBLINGS,
    FREE_RUNNING,
    MODES,
    SAME_TEXT,
    TEXT_OF,
    full_depth_variant,
    run_settings,
    sibling_params,
)
from playground.visitors import secret_hash

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """More runs are queued or running than ``PLAYGROUND_MAX_QUEUED``."""


class VisitorLimit(Exception):
    """This visitor already has ``PLAYGROUND_VISITOR_ACTIVE`` runs queued or running."""


class NotOwner(Exception):
    """Only a run's creator may stop it."""


class ModelUnavailable(Exception):
    """The named checkpoint is not configured or its directory cannot be read."""


class BrokerUnavailable(Exception):
    """The run could not be handed to the workers' queue; it was failed, holding no slot."""


GENERATE_TASK = "workers.tasks.run_generate"
BROKER_UNREACHABLE = "the run queue (broker) could not be reached"


def run_enqueue(*, run: Run) -> None:
    """Send the run's generation to the workers, by task name (the web side does not
    import the worker's code). A broker that cannot take it fails the run with the
    reason and raises ``BrokerUnavailable``: no run is left queued with no task behind it.
    """
    from kombu.exceptions import OperationalError

    from workers import celery_app

    try:
        celery_app.send_task(GENERATE_TASK, args=[str(run.id)])
    except (OperationalError, OSError) as exc:
        # The public reason names no address; the broker's own error goes to the log.
        logger.warning("run %s: the broker refused it: %s", run.id, exc)
        run_fail(run_id=run.id, reason=BROKER_UNREACHABLE)
        raise BrokerUnavailable(
            "The playground cannot start runs right now: its run queue is unreachable. "
            "Nothing was queued; try again in a minute."
        ) from exc


MAX_PROMPT_CHARS = 2000


def run_params_clean(
    *, prompt: str, model: str = "", extrapolate: bool = False, **values: Any
) -> tuple[ModelInfo, dict[str, Any]]:
    """Check a submission against ``RunParams``'s bounds and the chosen model.

    ``values`` are ``RunParams`` fields (defaults for the rest). Returns the model and
    ``Run.params`` (the ``RunParams`` fields plus ``extrapolate``); raises
    ``ValidationError({field: [message]})`` naming each bad field.
    """
    errors: dict[str, list[str]] = {}

    def check(field: str, ok: bool, message: str) -> None:
        if not ok:
            errors.setdefault(field, []).append(message)

    check("prompt", bool(prompt and prompt.strip()), "must not be blank")
    check("prompt", len(prompt) <= MAX_PROMPT_CHARS, f"at most {MAX_PROMPT_CHARS} characters")
    check("prompt", "\x00" not in prompt, "must not contain NUL characters")
    params = RunParams(**values)
    for field, rule in params.errors().items():
        check(field, False, rule)
    loops, max_new_tokens = params.loops, params.max_new_tokens
    name = model or default_model_name()
    info = model_get(name=name)
    if info is None:
        names = ", ".join(settings.PLAYGROUND_MODELS) or "none"
        check("model", False, f"no model named {name!r}; configured: {names}")
    elif not info.available:
        check("model", False, f"{name} is not available: {info.problem}")
    elif not errors:
        trained, most = info.loops, info.max_loops
        if loops is not None and trained is not None and most is not None and loops > trained:
            if not extrapolate:
                check(
                    "loops",
                    False,
                    f"{name} was trained with {trained} loops; going beyond needs "
                    f"extrapolate (up to {most})",
                )
            else:
                check("loops", loops <= most, f"at most {most} (2 × T)")
        if info.max_positions is not None:
            count = prompt_token_count(model=info, text=prompt)
            check(
                "prompt",
                count + max_new_tokens <= info.max_positions,
                f"{count} tokens + max_new_tokens {max_new_tokens} exceed the "
                f"{info.max_positions} positions of {name}",
            )
        if params.fixed_loops is not None and info.max_loops is not None:
            check("fixed_loops", params.fixed_loops <= info.max_loops, f"at most {info.max_loops}")
    if errors:
        raise ValidationError(errors)
    assert info is not None  # no such model is an error above
    return info, asdict(params) | {"extrapolate": extrapolate}


def run_submit(
    *,
    prompt: str,
    visitor: str = "",
    address: str = "",
    owner_secret: str = "",
    compare_of: Run | None = None,
    same_text: bool = False,
    branch: dict[str, Any] | None = None,
    **params: Any,
) -> Run:
    """Validate, create a queued run and enqueue its generation once this commits.

    ``visitor`` (``playground.visitors``: a page session, or an API client's address) is
    who submits and ``address`` the client address it came from; each is held to
    ``PLAYGROUND_VISITOR_ACTIVE`` active-run slots (``selectors.run_active_counts``: a run
    started to compare with ``compare_of`` shares that run's slot, and a run has at most
    ``COMPARE_SIBLINGS`` such siblings of one visitor or address active), so a fresh
    cookie buys no slot. ``branch`` (``branching.BRANCH_OF``) records where a branch of
    ``compare_of`` took another token. ``owner_secret`` (a session's secret or an API
    cancel token) is what stopping the run will need, stored as its hash. The other
    keyword arguments are those of ``run_params_clean`` (``model`` by name, default the
    first configured).
    Raises ``ValidationError`` naming the bad fields, ``VisitorLimit``, and ``QueueFull``
    when ``PLAYGROUND_MAX_QUEUED`` runs are queued or running. The limits are counted and
    the run created under ``_submits_serialised``: concurrent submits cannot all pass.
    """
    model, run_params = run_params_clean(prompt=prompt, **params)
    if same_text and compare_of is not None:  # scored on compare_of's text, not sampled
        run_params[TEXT_OF] = str(compare_of.id)
    if branch is not None:
        run_params[BRANCH_OF] = branch
    with transaction.atomic():
        _submits_serialised()
        refusal = _limit_refusal(visitor=visitor, address=address, joining=compare_of)
        if refusal is not None:
            # Runs whose worker died hold their slots until swept. Viewers and starting
            # workers sweep too; a submit sweeps only when such runs may be what refuses
            # it, which keeps the sweep's queries off every visitor's way to a first token.
            run_fail_stale()
            refusal = _limit_refusal(visitor=visitor, address=address, joining=compare_of)
        if refusal is not None:
            raise refusal
        run = Run.objects.create(
            prompt=prompt,
            model=model.name,
            params=run_params,
            trained_loops=model.loops,
            visitor=visitor,
            address=address,
            owner_hash=secret_hash(owner_secret) if owner_secret else "",
            compare_of=compare_of,
        )
        transaction.on_commit(lambda: run_enqueue(run=run))
    return run


# The PostgreSQL advisory lock that submits take: any number no other code uses ("play").
SUBMIT_LOCK = 0x706C6179


def _submits_serialised() -> None:
    """Make this transaction the only submit counting and creating runs until it ends.

    The limits are a count, then an insert: two submits that both count before either
    inserts would both pass (20 at once from one address made 15 runs under a limit of 2).
    """
    transaction_serialised(SUBMIT_LOCK)


def _limit_refusal(
    *, visitor: str, address: str, joining: Run | None
) -> VisitorLimit | QueueFull | None:
    """What refuses a submit by ``visitor`` from ``address`` (joining ``joining``'s
    group) now, if anything."""
    counts = selectors.run_active_counts(visitor=visitor, address=address, joining=joining)
    limit = settings.PLAYGROUND_VISITOR_ACTIVE
    if visitor and counts.slots >= limit:
        return VisitorLimit(
            f"You already have {limit} runs queued or running (the limit per visitor, "
            "PLAYGROUND_VISITOR_ACTIVE; a run compared with its siblings counts once); "
            "wait for one to finish or stop it."
        )
    if address and counts.address_slots >= limit:
        return VisitorLimit(
            f"Your address already has {limit} runs queued or running (the limit per "
            "visitor and per address, PLAYGROUND_VISITOR_ACTIVE, whatever the browser "
            "session); wait for one to finish or stop it."
        )
    if joining is not None and (visitor or address) and counts.siblings >= COMPARE_SIBLINGS:
        return VisitorLimit(
            f"You already have {COMPARE_SIBLINGS} runs comparing with this one queued or "
            "running; wait for them to finish or stop them."
        )
    if counts.total >= settings.PLAYGROUND_MAX_QUEUED:
        return QueueFull(
            f"The playground is busy: {settings.PLAYGROUND_MAX_QUEUED} runs are already "
            "queued or running. Try again in a minute."
        )
    return None


@transaction.atomic
def run_compare_submit(
    *,
    run: Run,
    variants: list[dict[str, Any]],
    mode: str = SAME_TEXT,
    visitor: str = "",
    address: str = "",
    owner_secret: str = "",
) -> list[Run]:
    """Start up to ``COMPARE_SIBLINGS`` siblings of ``run``: its prompt, model, seed and
    settings, each with one variant's settings instead (``siblings.sibling_params``).

    Each goes through ``run_submit`` as any run does (checks, limits, owner); together
    they hold one of the visitor's active-run slots, so a visitor may compare three runs
    under the default limit of two (against the submit rate, each counts: the views take
    one submit per variant). All or none start, and together once this commits, so one
    worker batches their steps.

    In ``SAME_TEXT`` mode each sibling is scored on ``run``'s stored tokens (so ``run``
    must have finished); in ``FREE_RUNNING`` mode each writes its own text.
    """
    if not 1 <= len(variants) <= COMPARE_SIBLINGS:
        raise ValidationError(
            {"variants": [f"give 1 to {COMPARE_SIBLINGS} settings to compare, not {len(variants)}"]}
        )
    if mode not in MODES:
        raise ValidationError({"mode": [f"must be one of {', '.join(MODES)}"]})
    if mode == SAME_TEXT and run.status not in (Run.Status.DONE, Run.Status.CANCELLED):
        raise ValidationError(
            {"mode": ["same text scores the siblings on this run's tokens: wait until it ends"]}
        )
    return [
        run_submit(
            prompt=run.prompt,
            model=run.model,
            visitor=visitor,
            address=address,
            owner_secret=owner_secret,
            compare_of=run,
            same_text=mode == SAME_TEXT,
            **sibling_params(run, variant),
        )
        for variant in variants
    ]


def run_full_depth_submit(
    *, run: Run, visitor: str = "", address: str = "", owner_secret: str = ""
) -> Run:
    """ "Compare with full depth": a sibling of ``run`` computing every loop of every
    position (``siblings.full_depth_variant``), whose settling loops the compare view sets
    against ``run``'s exits. Scored on ``run``'s text once it has ended (every position
    compares), free-running while it runs; limits and ownership as any sibling's."""
    ended = run.status in (Run.Status.DONE, Run.Status.CANCELLED)
    (sibling,) = run_compare_submit(
        run=run,
        variants=[full_depth_variant(run)],
        mode=SAME_TEXT if ended else FREE_RUNNING,
        visitor=visitor,
        address=address,
        owner_secret=owner_secret,
    )
    return sibling


def run_branch_submit(
    *,
    run: Run,
    position: int,
    token_id: int,
    visitor: str = "",
    address: str = "",
    owner_secret: str = "",
) -> Run:
    """Branch ``run`` at generated ``position``: a sibling with its settings whose prompt
    is the run's tokens before ``position`` plus ``token_id`` (``branching.branch_make``).
    Limits and ownership as any sibling's (``run_submit`` with ``compare_of``); raises
    ``ValidationError`` naming ``position`` or ``token_id`` when the branch cannot be made."""
    model = model_get(name=run.model)
    if model is None or not model.available:
        raise ValidationError({"model": [f"{run.model} is not available to branch from"]})
    tokens = [token.data for token in selectors.run_tokens(run=run)]
    try:
        branch = branch_make(
            prompt=run.prompt, model=model, tokens=tokens, position=position, token_id=token_id
        )
    except BranchError as exc:
        raise ValidationError({exc.field: [str(exc)]}) from None
    return run_submit(
        prompt=branch.prompt,
        visitor=visitor,
        address=address,
        owner_secret=owner_secret,
        compare_of=run,
        branch=branch.params(str(run.id)),
        **run_settings(run) | {"model": run.model},
    )


def run_cancel(*, run: Run) -> Run:
    """Ask the run to stop: a queued run is cancelled at once, a running one between
    tokens by its worker; a finished run is left as it is."""
    Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE).update(cancel_requested=True)
    updated = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.CANCELLED, finished_at=timezone.now()
    )
    run.refresh_from_db()
    if updated:
        run_end_publish(run)
    return run


def run_stop(*, run: Run, secret: str) -> Run:
    """``run_cancel`` for the run's creator only: ``secret`` is the session's owner secret
    or the cancel token the API returned; anyone else gets ``NotOwner``."""
    if not run_owned(run=run, secret=secret):
        raise NotOwner(
            "Only the visitor who started this run can stop it: from the page, the same "
            "browser session; from the API, the cancel_token returned when it was created "
            "(header X-Cancel-Token)."
        )
    return run_cancel(run=run)


def run_owned(*, run: Run, secret: str) -> bool:
    return bool(secret and run.owner_hash) and hmac.compare_digest(
        secret_hash(secret), run.owner_hash
    )


def run_fail(*, run_id: uuid.UUID | str, reason: str, only_worker: str = "") -> bool:
    """Mark an active run failed with ``reason`` (a finished one is left alone)."""
    runs = Run.objects.filter(pk=run_id, status__in=Run.ACTIVE)
    if only_worker:
        runs = runs.filter(worker=only_worker)
    return _fail(runs, run_id=run_id, reason=reason)


def _fail(runs, *, run_id: uuid.UUID | str, reason: str) -> bool:
    """Fail the run if ``runs`` (its conditions, checked in the UPDATE) still holds it."""
    updated = runs.update(status=Run.Status.FAILED, error=reason, finished_at=timezone.now())
    if updated:
        logger.warning("run %s failed: %s", run_id, reason)
        run_end_publish(Run.objects.get(pk=run_id))
    return bool(updated)


def run_fail_stale(*, now=None) -> list[uuid.UUID]:
    """Fail every running run whose worker stopped sending heartbeats, and every run
    that no worker took from the queue in time."""
    now = now or timezone.now()
    failed = []
    for run in selectors.run_stale_list(now=now):
        if run.status == Run.Status.QUEUED:
            reason = (
                f"no worker took it within {settings.PLAYGROUND_QUEUED_TIMEOUT_S} s "
                "(is a worker running on queue gpu?)"
            )
        else:
            reason = (
                "the worker running it stopped responding for over "
                f"{settings.PLAYGROUND_STALE_AFTER_S} s; it was lost mid-run"
            )
        # The same conditions again in the UPDATE: a run claimed or beating meanwhile stays.
        still_stale = selectors.run_stale_list(now=now).filter(pk=run.pk, status=run.status)
        if _fail(still_stale, run_id=run.id, reason=reason):
            logger.warning("run %s was on worker %s", run.id, run.worker or "none")
            failed.append(run.id)
    return failed


def run_fail_orphans(*, worker: str) -> list[uuid.UUID]:
    """A worker starting under ``worker``'s name: its earlier process's runs are dead."""
    failed = []
    for run_id in Run.objects.filter(status=Run.Status.RUNNING, worker=worker).values_list(
        "id", flat=True
    ):
        reason = "the worker running it was restarted mid-run"
        if run_fail(run_id=run_id, reason=reason, only_worker=worker):
            logger.warning("run %s: its worker %s was restarted", run_id, worker)
            failed.append(run_id)
    return failed


def run_end_event(run: Run) -> tuple[str, dict]:
    """The final SSE event of a finished run: ``done`` or ``error`` with its payload."""
    if run.status == Run.Status.FAILED:
        return "error", {"status": run.status, "error": run.error}
    return "done", {"status": run.status, "stats": run.stats, "error": run.error}


def run_end_publish(run: Run, last_position: int | None = None) -> None:
    """Publish a finished run's end event to its stream (no-op in embedded mode)."""
    if not streams.publishing():
        return
    if last_position is None:
        last = RunToken.objects.filter(run=run).order_by("-position").first()
        last_position = last.position if last else -1
    event, data = run_end_event(run)
    streams.publish_end(run_id=run.id, last_position=last_position, event=event, data=data)
