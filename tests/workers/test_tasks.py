"""The task bodies, called directly (no worker), and the worker's signal handlers."""

from types import SimpleNamespace

from django.utils import timezone

from playground import services
from playground.models import Run
from tests.playground.conftest import PROMPT
from workers import tasks


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
    assert run.status == "failed" and "worker process was lost" in run.error


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
