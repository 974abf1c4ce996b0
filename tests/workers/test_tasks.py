"""The task bodies, called directly (no worker), and the worker's signal handlers."""

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from django.db import OperationalError
from django.utils import timezone

from loopatlas import outage
from playground import services
from playground.models import Run
from tests.playground.conftest import PROMPT
from workers import execution, tasks


def test_the_task_generates_the_run(db):
    # given
    run = services.run_submit(prompt=PROMPT, max_new_tokens=3)

    # when
    tasks.run_generate(str(run.id))

    # then
    run.refresh_from_db()
    assert run.status == "done"
    assert run.tokens.filter(phase="generated").count() == 3


def test_the_task_is_routed_to_the_gpu_queue_and_acknowledged_late():
    # then
    assert tasks.run_generate.acks_late is True
    soft, hard = tasks.run_generate.soft_time_limit, tasks.run_generate.time_limit
    assert soft is not None and hard is not None and soft < hard
    from workers.celery import app

    assert app.conf.worker_prefetch_multiplier == 1
    assert app.amqp.router.route({}, tasks.run_generate.name)["queue"].name == "gpu"


def test_a_lost_task_process_fails_its_run(run_factory):
    # given
    run = run_factory(status="running", heartbeat_at=timezone.now())

    # when: what Celery sends when the pool process running it is killed
    tasks._run_generate_failed(
        sender=tasks.run_generate, exception=RuntimeError("Worker exited"), args=[str(run.id)]
    )

    # then
    run.refresh_from_db()
    assert run.status == "failed" and run.error == "its worker process was lost"


def test_the_hard_time_limit_fails_the_run_with_the_reason(run_factory, settings):
    # given
    from celery.exceptions import TimeLimitExceeded

    run = run_factory(status="running", heartbeat_at=timezone.now())

    # when
    tasks._run_generate_failed(
        sender=tasks.run_generate, exception=TimeLimitExceeded(660), args=[str(run.id)]
    )

    # then
    run.refresh_from_db()
    assert run.status == "failed" and "hard time limit" in run.error


def test_other_tasks_failures_are_not_ours(run_factory):
    # given
    run = run_factory(status="running", heartbeat_at=timezone.now())

    # when
    tasks._run_generate_failed(sender=SimpleNamespace(name="x"), args=[str(run.id)])

    # then
    run.refresh_from_db()
    assert run.status == "running"


def test_a_starting_worker_fails_what_its_earlier_process_left_running(run_factory):
    # given
    left = run_factory(status="running", heartbeat_at=timezone.now(), worker="celery@gpu1")

    # when
    tasks._worker_ready(sender=SimpleNamespace(hostname="celery@gpu1"))

    # then
    left.refresh_from_db()
    assert left.status == Run.Status.FAILED and "restarted" in left.error


def test_a_pool_process_pins_torch_threads(settings):
    import torch

    before = torch.get_num_threads()
    settings.PLAYGROUND_TORCH_THREADS = before + 1
    try:
        # when a pool process starts
        tasks._worker_init()

        # then torch runs on the configured threads
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.django_db(transaction=True)
def test_a_worker_thread_keeps_its_database_connection_from_one_run_to_the_next(monkeypatch):
    from celery.fixups.django import DjangoFixup
    from celery.signals import task_postrun, task_prerun
    from django.conf import settings
    from django.db import connection

    from workers.celery import app

    # given a worker started as deployed (its settings, Celery's Django fixup)
    monkeypatch.setitem(settings.DATABASES["default"], "CONN_MAX_AGE", 0)  # restored after
    tasks._worker_keeps_connections()
    fixup = DjangoFixup(app).worker_fixup  # what closes a task's connections

    def task() -> object:  # a task as the pool runs it: the signals around its body
        fixup.on_task_prerun(sender=tasks.run_generate)
        task_prerun.send(sender=tasks.run_generate)
        assert Run.objects.count() == 0
        opened = connection.connection  # the driver's connection the query went through
        fixup.on_task_postrun(sender=tasks.run_generate)
        task_postrun.send(sender=tasks.run_generate)
        return opened

    def thread() -> list[object]:
        try:
            return [task(), task()]
        finally:
            connection.close()

    # when one task thread runs two tasks
    try:
        with ThreadPoolExecutor(1) as pool:
            first, second = pool.submit(thread).result()
    finally:
        task_prerun.disconnect(tasks._close_old_connections)
        task_postrun.disconnect(tasks._close_old_connections)

    # then the second used the first one's connection
    assert first is not None and first is second


def test_a_run_past_its_time_limit_fails_with_the_reason_and_the_worker_goes_on(db, settings):
    # given a time limit no run can meet (the threads pool does not apply Celery's)
    settings.PLAYGROUND_SOFT_TIME_LIMIT_S = 0.001
    run = services.run_submit(prompt=PROMPT, max_new_tokens=50)

    # when
    tasks.run_generate(str(run.id))

    # then
    run.refresh_from_db()
    assert run.status == "failed" and run.error == "it ran past the 0.001 s time limit"
    settings.PLAYGROUND_SOFT_TIME_LIMIT_S = 600
    later = services.run_submit(prompt=PROMPT, max_new_tokens=3)
    tasks.run_generate(str(later.id))
    later.refresh_from_db()
    assert later.status == "done"


@pytest.mark.django_db(transaction=True)
def test_a_run_failed_by_a_database_outage_names_it_once_the_database_answers(
    run_factory, server_drops_our_connection, monkeypatch
):
    # given a running run whose worker's connection the server has ended
    monkeypatch.setattr(outage, "RETRY_EVERY_S", 0.01)
    run = run_factory(status="running", heartbeat_at=timezone.now())
    server_drops_our_connection()

    # when the run fails on that connection's error
    execution._finish_failed(run, OperationalError("terminating connection"), -1)

    # then its failure is stored, on a new connection, naming the database
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("the database was unreachable for ")


@pytest.mark.django_db(transaction=True)
def test_a_database_error_on_a_live_connection_fails_the_run_as_a_worker_error(run_factory):
    run = run_factory(status="running", heartbeat_at=timezone.now())

    execution._finish_failed(run, OperationalError("too complex"), -1)

    run.refresh_from_db()
    assert run.error == "the worker hit an error: OperationalError"


def test_a_same_text_sibling_is_scored_on_the_runs_tokens_as_the_engine_scores_them(db):
    # given a finished sampled run, and its sibling at q 0.3 with select KV in same-text mode
    from kernels.checkpoint import load_checkpoint
    from kernels.engine import Engine
    from kernels.rules import QExit
    from playground.checkpoints import model_get
    from playground.comparison import runs_compare

    origin = services.run_submit(prompt=PROMPT, max_new_tokens=8, temperature=0.9, seed=5)
    tasks.run_generate(str(origin.id))
    origin.refresh_from_db()
    (sibling,) = services.run_compare_submit(
        run=origin, variants=[{"q": 0.3, "kv_policy": "select"}]
    )
    # when the worker runs it
    tasks.run_generate(str(sibling.id))
    # then it holds the run's tokens, each with the exit the engine gives it on that text
    sibling.refresh_from_db()
    ids = list(origin.tokens.order_by("position").values_list("token_id", flat=True))
    forced = list(sibling.tokens.order_by("position"))
    assert sibling.status == "done" and [token.token_id for token in forced] == ids
    assert [t.phase for t in forced] == list(
        origin.tokens.order_by("position").values_list("phase", flat=True)
    )
    model = model_get(name=sibling.model)
    assert model is not None
    loaded = load_checkpoint(model.path, device="cpu")
    engine = Engine(loaded.model, QExit(0.3), "select", trace=True)
    direct = engine.prompt_records(engine.prefill([ids]))
    assert [token.exit_loop for token in forced] == [record.exit_loop for record in direct]
    # and their comparison is in same-text mode, every position compared
    comparison = runs_compare(raw=f"{origin.id},{sibling.id}")
    assert comparison.mode == "same-text" and comparison.divergence is None
    assert all(position.compared for position in comparison.positions)
    assert len(comparison.positions) == len(ids)
