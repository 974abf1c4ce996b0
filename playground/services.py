"""Everything the web side writes of runs: submit, cancel and fail.

A run's life: ``run_submit`` validates and creates it ``queued`` and enqueues the Celery
task once the transaction commits; the worker's ``workers.execution.run_execute`` claims
it (``running``),
streams the engine's events into ``RunToken`` rows and the run's Redis stream, and ends it
``done``, ``cancelled`` or ``failed``. A worker that dies leaves a stale heartbeat:
``run_fail_stale`` (run by viewers, submits and every worker at startup) marks such runs
failed with the reason, so none stays ``running``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from playground import selectors, streams
from playground.checkpoints import ModelInfo, default_model_name, model_get, prompt_token_count
from playground.models import Run, RunToken

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """More runs are queued or running than ``PLAYGROUND_MAX_QUEUED``."""


class ModelUnavailable(Exception):
    """The named checkpoint is not configured or its directory cannot be read."""


def run_enqueue(*, run: Run) -> None:
    from workers.tasks import run_generate

    run_generate.delay(str(run.id))


MAX_PROMPT_CHARS = 2000
MAX_NEW_TOKENS = 256
# kernels.stream.EXIT_RULES and kernels.rules.POLICIES, named here so that the web
# process validates without importing torch (a test keeps them equal).
EXIT_RULES = ("q-exit", "convergence", "fixed", "ponder", "act")
KV_POLICIES = ("best-available", "select", "recompute-kv")


def run_params_clean(
    *,
    prompt: str,
    model: str = "",
    exit_rule: str = "q-exit",
    q: float = 0.7,
    loops: int | None = None,
    extrapolate: bool = False,
    kv_policy: str = "best-available",
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    top_k: int = 5,
    kl_threshold: float = 1e-3,
    fixed_loops: int | None = None,
) -> tuple[ModelInfo, dict[str, Any]]:
    """Check a submission against the rules and the chosen model.

    Returns the model and ``Run.params`` (the ``GenerationParams`` fields plus
    ``extrapolate``); raises ``ValidationError({field: [message]})`` naming each bad field.
    """
    errors: dict[str, list[str]] = {}

    def check(field: str, ok: bool, message: str) -> None:
        if not ok:
            errors.setdefault(field, []).append(message)

    check("prompt", bool(prompt and prompt.strip()), "must not be blank")
    check("prompt", len(prompt) <= MAX_PROMPT_CHARS, f"at most {MAX_PROMPT_CHARS} characters")
    check("prompt", "\x00" not in prompt, "must not contain NUL characters")
    check("exit_rule", exit_rule in EXIT_RULES, f"one of {', '.join(EXIT_RULES)}")
    check("q", 0 < q <= 1, "must lie in (0, 1]")
    check("kv_policy", kv_policy in KV_POLICIES, f"one of {', '.join(KV_POLICIES)}")
    check("max_new_tokens", 0 <= max_new_tokens <= MAX_NEW_TOKENS, f"0 to {MAX_NEW_TOKENS}")
    check("temperature", temperature >= 0, "must be >= 0 (0 = greedy)")
    check("top_p", 0 < top_p <= 1, "must lie in (0, 1]")
    check("seed", 0 <= seed < 2**63, "must be a non-negative 64-bit integer")
    check("top_k", 0 <= top_k <= 20, "0 to 20")
    check("kl_threshold", kl_threshold > 0, "must be > 0")
    check("loops", loops is None or loops >= 1, "must be >= 1")
    if exit_rule == "fixed":
        check("fixed_loops", fixed_loops is not None and fixed_loops >= 1, "must be >= 1")
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
    if errors:
        raise ValidationError(errors)
    assert info is not None  # a missing model is one of the errors above
    params = {
        "max_new_tokens": max_new_tokens,
        "exit_rule": exit_rule,
        "q": q,
        "kl_threshold": kl_threshold,
        "fixed_loops": fixed_loops,
        "loops": loops,
        "kv_policy": kv_policy,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "top_k": top_k,
        "extrapolate": extrapolate,
    }
    return info, params


@transaction.atomic
def run_submit(*, prompt: str, **params: Any) -> Run:
    """Validate, create a queued run and enqueue its generation once this commits.

    Keyword arguments are those of ``run_params_clean`` (``model`` by name, default the
    first configured). Raises ``ValidationError`` naming the bad fields, and ``QueueFull``
    when ``PLAYGROUND_MAX_QUEUED`` runs are queued or running.
    """
    model, run_params = run_params_clean(prompt=prompt, **params)
    run_fail_stale()
    if selectors.run_active_count() >= settings.PLAYGROUND_MAX_QUEUED:
        raise QueueFull(
            f"The playground is busy: {settings.PLAYGROUND_MAX_QUEUED} runs are already "
            "queued or running. Try again in a minute."
        )
    run = Run.objects.create(
        prompt=prompt, model=model.name, params=run_params, trained_loops=model.loops
    )
    transaction.on_commit(lambda: run_enqueue(run=run))
    return run


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
                f"the worker running it ({run.worker or 'unknown'}) stopped responding "
                f"for over {settings.PLAYGROUND_STALE_AFTER_S} s; it was lost mid-run"
            )
        # The same conditions again in the UPDATE: a run claimed or beating meanwhile stays.
        still_stale = selectors.run_stale_list(now=now).filter(pk=run.pk, status=run.status)
        if _fail(still_stale, run_id=run.id, reason=reason):
            failed.append(run.id)
    return failed


def run_fail_orphans(*, worker: str) -> list[uuid.UUID]:
    """A worker starting under ``worker``'s name: its earlier process's runs are dead."""
    failed = []
    for run_id in Run.objects.filter(status=Run.Status.RUNNING, worker=worker).values_list(
        "id", flat=True
    ):
        reason = f"the worker running it ({worker}) was restarted mid-run"
        if run_fail(run_id=run_id, reason=reason, only_worker=worker):
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
