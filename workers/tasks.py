"""Celery tasks: thin wrappers that take a run id and call ``playground.services``.

``run_generate`` runs on queue ``gpu`` (``CELERY_TASK_ROUTES``), acknowledged late with
prefetch 1 (settings), under soft and hard time limits. It is idempotent: a redelivered
message finds the run already claimed or finished and does nothing (see
``workers.execution.run_claim``). The worker runs ``--pool threads`` with
``PLAYGROUND_BATCH`` threads: each task hands its run to the process's batch
(``workers.batching``) and blocks until the run ends.
"""

import logging
import socket
from typing import Any

from celery import Task, shared_task
from celery.exceptions import TimeLimitExceeded
from celery.signals import (
    task_failure,
    task_postrun,
    task_prerun,
    worker_init,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import close_old_connections

from playground import services
from playground.checkpoints import model_catalog
from workers import execution
from workers.resident import resident_model
from workers.sweep import Sweeper

logger = logging.getLogger(__name__)


@shared_task(
    name="workers.tasks.run_generate",
    acks_late=True,
    soft_time_limit=settings.PLAYGROUND_SOFT_TIME_LIMIT_S,
    time_limit=settings.PLAYGROUND_HARD_TIME_LIMIT_S,
    bind=True,
)
def run_generate(self: Task[Any, Any], run_id: str) -> None:
    worker = (self.request.hostname if self.request else "") or socket.gethostname()
    execution.run_execute(run_id=run_id, worker=worker)


@task_failure.connect
def _run_generate_failed(
    sender: object = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    args: list[Any] | tuple[Any, ...] | None = None,
    **kwargs: Any,
) -> None:
    """The task died outside the service's own handling (a killed pool process, the hard
    time limit): the run records the reason instead of staying ``running``."""
    if getattr(sender, "name", None) != run_generate.name:
        return
    run_id = (args or [None])[0] or (kwargs.get("kwargs") or {}).get("run_id")
    if not run_id:
        return
    if isinstance(exception, TimeLimitExceeded):
        reason = f"it ran past the {settings.PLAYGROUND_HARD_TIME_LIMIT_S} s hard time limit"
    else:
        logger.error("run %s: its worker process was lost: %r", run_id, exception)
        reason = "its worker process was lost"
    services.run_fail(run_id=run_id, reason=reason)


@worker_init.connect
def _worker_init(**kwargs: Any) -> None:
    """Each pool process pins torch's intra-op threads before it loads a model."""
    import torch

    if settings.PLAYGROUND_TORCH_THREADS > 0:
        torch.set_num_threads(settings.PLAYGROUND_TORCH_THREADS)


@worker_init.connect
def _worker_keeps_connections(**kwargs: Any) -> None:
    """The worker's task threads keep their database connections between runs, up to
    WORKER_DB_CONN_MAX_AGE seconds (Celery's closing is held off by CELERY_DB_REUSE_MAX)."""
    for database in settings.DATABASES.values():  # read by each connection as it opens
        database["CONN_MAX_AGE"] = settings.WORKER_DB_CONN_MAX_AGE
    task_prerun.connect(_close_old_connections)
    task_postrun.connect(_close_old_connections)


def _close_old_connections(**kwargs: Any) -> None:
    """Around each task, what Django does around each request: the thread's connection
    is closed if it is past its age or broken (else its next query checks it first), and
    kept otherwise."""
    close_old_connections()


@worker_ready.connect
def _worker_ready(sender: object = None, **kwargs: Any) -> None:
    """Runs left ``running`` by an earlier process under this worker's name are dead;
    so are runs anywhere whose heartbeat went stale. Then the models are made resident."""
    hostname = getattr(sender, "hostname", "")
    try:
        if hostname:
            services.run_fail_orphans(worker=hostname)
        services.run_fail_stale()
    except Exception:  # the sweep must never keep a worker from starting
        logger.exception("startup sweep of stale runs failed")
    # Load the models before taking runs: a cold torch import and load take seconds on a
    # busy CPU, which the first run (and its heartbeat) would otherwise wait through.
    for model in model_catalog():
        if not model.available:
            continue
        try:
            resident_model(model.path)
        except Exception:  # a broken checkpoint fails its runs with the reason, later
            logger.exception("could not preload model %s", model.name)


_sweepers: list[Sweeper] = []


@worker_ready.connect
def _sweep_start(**kwargs: Any) -> None:
    """From now on this worker fails stale runs every few seconds (``workers.sweep``)."""
    _sweepers.append(Sweeper(every_s=settings.PLAYGROUND_STALE_SWEEP_S).start())


@worker_shutdown.connect
def _sweep_stop(**kwargs: Any) -> None:
    while _sweepers:
        _sweepers.pop().stop()
