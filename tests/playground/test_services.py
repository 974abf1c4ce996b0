import json
from datetime import timedelta
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from kombu.exceptions import OperationalError

from playground import recording, services, streams
from playground.models import Run, RunToken
from playground.recording import event_storable
from playground.visitors import secret_hash
from tests.playground.conftest import PROMPT, TINY
from tests.playground.stack import token_view
from workers import execution

# -- submit


@pytest.mark.django_db
def test_submit_creates_a_queued_run_and_enqueues_it_on_commit(
    django_capture_on_commit_callbacks,
):
    # when
    with (
        mock.patch.object(services, "run_enqueue") as enqueue,
        django_capture_on_commit_callbacks(execute=True),
    ):
        run = services.run_submit(prompt=PROMPT, q=0.5, loops=2, seed=3)

    # then
    enqueue.assert_called_once_with(run=run)
    assert (run.status, run.model, run.trained_loops) == ("queued", "ouro-tiny", 4)
    assert run.params == {
        "max_new_tokens": 64,
        "exit_rule": "q-exit",
        "q": 0.5,
        "kl_threshold": 1e-3,
        "fixed_loops": None,
        "act_eps": 0.01,
        "loops": 2,
        "kv_policy": "best-available",
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": 3,
        "top_k": 5,
        "speculate_loops": 0,
        "speculate_tokens": 4,
        "extrapolate": False,
    }


@pytest.mark.django_db
def test_the_enqueued_task_goes_to_the_gpu_queue():
    # given
    run = Run.objects.create(prompt=PROMPT, model="ouro-tiny")

    # when
    from workers.celery import app

    with mock.patch.object(app, "send_task") as send_task:
        services.run_enqueue(run=run)

    # then
    send_task.assert_called_once_with("workers.tasks.run_generate", args=[str(run.id)])
    from workers import tasks

    assert tasks.run_generate.name == services.GENERATE_TASK

    assert app.amqp.router.route({}, "workers.tasks.run_generate")["queue"].name == "gpu"


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("prompt", {"prompt": "   "}),
        ("prompt", {"prompt": "x" * 2001}),
        ("prompt", {"prompt": "a\x00b"}),
        ("prompt", {"prompt": "x" * 500, "max_new_tokens": 64}),  # 564 > 512 positions
        ("q", {"q": 0}),
        ("q", {"q": 1.5}),
        ("loops", {"loops": 0}),
        ("loops", {"loops": 5}),  # beyond the trained T = 4 without extrapolate
        ("loops", {"loops": 9, "extrapolate": True}),  # beyond 2·T
        ("kv_policy", {"kv_policy": "magic"}),
        ("exit_rule", {"exit_rule": "never"}),
        ("fixed_loops", {"exit_rule": "fixed"}),
        ("max_new_tokens", {"max_new_tokens": 257}),
        ("max_new_tokens", {"max_new_tokens": -1}),
        ("temperature", {"temperature": -0.1}),
        ("top_p", {"top_p": 0}),
        ("seed", {"seed": -1}),
        ("model", {"model": "nope"}),
    ],
)
@pytest.mark.django_db
def test_submit_refuses_out_of_range_values_naming_the_field(field, values):
    # when
    with pytest.raises(ValidationError) as caught:
        services.run_submit(**({"prompt": PROMPT} | values))

    # then
    assert field in caught.value.message_dict
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_submit_allows_up_to_twice_the_trained_loops_with_extrapolate():
    # when
    run = services.run_submit(prompt=PROMPT, loops=8, extrapolate=True)

    # then
    assert run.params["loops"] == 8 and run.params["extrapolate"] is True


@pytest.mark.django_db
def test_submit_refuses_a_model_whose_directory_is_missing(settings, tmp_path):
    # given
    settings.PLAYGROUND_MODELS = {"gone": tmp_path / "gone"}

    # when
    with pytest.raises(ValidationError) as caught:
        services.run_submit(prompt=PROMPT)

    # then
    assert "is not available" in caught.value.message_dict["model"][0]


@pytest.mark.django_db
def test_submit_refuses_when_the_queue_is_full(settings, run_factory):
    # given
    settings.PLAYGROUND_MAX_QUEUED = 2
    run_factory(status="queued")
    run_factory(status="running", heartbeat_at=timezone.now())
    run_factory(status="done")

    # when
    with pytest.raises(services.QueueFull, match="2 runs are already queued or running"):
        services.run_submit(prompt=PROMPT)


@pytest.mark.django_db
def test_submit_first_clears_runs_whose_worker_died(settings, run_factory):
    # given
    settings.PLAYGROUND_MAX_QUEUED = 1
    stale = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    dead = run_factory(status="running", heartbeat_at=stale, worker="w@host")

    # when
    run = services.run_submit(prompt=PROMPT)

    # then
    dead.refresh_from_db()
    assert run.status == "queued"
    assert dead.status == "failed" and "stopped responding" in dead.error
    assert "w@host" not in dead.error  # the worker's host name is in the log only


@pytest.mark.django_db
def test_a_submit_under_its_limits_leaves_the_sweep_to_viewers_and_workers(
    settings, run_factory, django_assert_max_num_queries
):
    # given: a run whose worker died, and room in every limit
    stale = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    dead = run_factory(status="running", heartbeat_at=stale, worker="w@host")

    # when: the submits' lock taken (PostgreSQL), the limits counted in one query and the
    # run stored (in a savepoint)
    with django_assert_max_num_queries(5):
        run = services.run_submit(prompt=PROMPT, visitor="v")

    # then
    dead.refresh_from_db()
    assert run.status == "queued"
    assert dead.status == "running"


# -- cancel


def test_cancelling_a_queued_run_cancels_it_at_once(run_factory):
    # when
    run = services.run_cancel(run=run_factory())

    # then
    assert run.status == "cancelled" and run.cancel_requested and run.finished_at


def test_cancelling_a_running_run_asks_its_worker(run_factory):
    # when
    run = services.run_cancel(run=run_factory(status="running"))

    # then
    assert run.status == "running" and run.cancel_requested


def test_cancelling_a_finished_run_changes_nothing(run_factory):
    # when
    run = services.run_cancel(run=run_factory(status="done"))

    # then
    assert run.status == "done" and not run.cancel_requested


# -- execute (the worker's side)


def _submitted(**params) -> Run:
    return services.run_submit(prompt=PROMPT, **params)


@pytest.mark.django_db
def test_execute_stores_what_the_engine_generates(direct_events):
    # given
    run = _submitted(max_new_tokens=12, seed=5, temperature=0.9)

    # when
    finished = execution.run_execute(run_id=run.id, worker="w@host")
    assert finished is not None

    # then
    stored = [token.data for token in RunToken.objects.filter(run=run)]
    assert finished.status == "done" and finished.worker == "w@host"
    assert finished.started_at and finished.finished_at
    assert finished.started_at <= finished.finished_at
    assert token_view(stored) == token_view(direct_events(PROMPT, **run.params))
    assert finished.stats["prompt_tokens"] == len(PROMPT)
    assert finished.stats["generated_tokens"] == len(stored) - len(PROMPT)
    assert finished.stats["stopped"] in ("max_new_tokens", "eos")


@pytest.mark.django_db
def test_a_claim_starts_the_run_and_beats_its_heartbeat_in_one_update(monkeypatch):
    # given a run, and heartbeats due only once an hour (however long loading the model
    # takes on a busy machine, the claim's own heartbeat is then the only one due)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(recording, "HEARTBEAT_EVERY_S", 3600.0)
    run = _submitted(max_new_tokens=2)

    # when
    with CaptureQueriesContext(connection) as queries:
        execution.run_execute(run_id=run.id, worker="w@host")

    # then before its first token is stored, the run was written once: claimed, beating
    sql = [query["sql"] for query in queries.captured_queries]
    first_token = next(
        i for i, q in enumerate(sql) if q.startswith('INSERT INTO "playground_runtoken"')
    )
    updates = [q for q in sql[:first_token] if q.startswith('UPDATE "playground_run"')]
    assert len(updates) == 1
    assert '"status"' in updates[0] and '"heartbeat_at"' in updates[0]


@pytest.mark.django_db
def test_execute_is_a_no_op_for_a_run_already_finished():
    # given
    run = _submitted(max_new_tokens=4)
    execution.run_execute(run_id=run.id, worker="w@host")
    count = RunToken.objects.count()

    # when: the broker delivers the message again
    again = execution.run_execute(run_id=run.id, worker="w@host")

    # then
    assert again is None
    assert RunToken.objects.count() == count


@pytest.mark.django_db
def test_execute_never_stores_a_position_twice(direct_events):
    # given: a queued run some of whose positions are already stored
    run = _submitted(max_new_tokens=6)
    direct = direct_events(PROMPT, **run.params)
    for event in map(event_storable, direct[:5]):
        RunToken.from_event(run, event).save()

    # when
    execution.run_execute(run_id=run.id, worker="w@host")

    # then
    stored = [token.data for token in RunToken.objects.filter(run=run)]
    assert token_view(stored) == token_view(direct)


@pytest.mark.django_db
def test_a_redelivered_run_whose_worker_died_is_failed_not_restarted(settings):
    # given: an earlier attempt left it running, and its heartbeat is stale
    run = _submitted()
    stale = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 5)
    Run.objects.filter(pk=run.pk).update(status="running", heartbeat_at=stale, worker="old")

    # when
    result = execution.run_execute(run_id=run.id, worker="new")

    # then
    run.refresh_from_db()
    assert result is None
    assert run.status == "failed" and "lost mid-run" in run.error


@pytest.mark.django_db
def test_a_run_running_elsewhere_is_left_to_its_worker():
    # given
    run = _submitted()
    Run.objects.filter(pk=run.pk).update(
        status="running", heartbeat_at=timezone.now(), worker="other"
    )

    # when
    result = execution.run_execute(run_id=run.id, worker="this")

    # then
    run.refresh_from_db()
    assert result is None and run.status == "running"


@pytest.mark.django_db
def test_a_run_cancelled_while_queued_never_starts():
    # given
    run = _submitted()
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)

    # when
    execution.run_execute(run_id=run.id, worker="w")

    # then
    run.refresh_from_db()
    assert run.status == "cancelled" and not run.tokens.exists()


@pytest.fixture
def stop_checked_every_token(monkeypatch):
    monkeypatch.setattr(recording, "STOP_CHECK_EVERY_S", 0)


@pytest.mark.django_db
def test_cancel_stops_the_run_between_generated_tokens(stop_checked_every_token):
    # given: cancelled as soon as the third generated token is stored
    run = _submitted(max_new_tokens=64)
    add = recording.TokenWriter.add

    def add_then_cancel(writer, event):
        add(writer, event)
        if event["position"] == len(PROMPT) + 2:
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)

    # when
    with mock.patch.object(recording.TokenWriter, "add", add_then_cancel):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then
    assert finished.status == "cancelled"
    assert finished.stats["stopped"] == "stopped"
    assert run.tokens.filter(phase="generated").count() == 3


@pytest.mark.django_db
def test_a_run_failed_meanwhile_stays_failed(stop_checked_every_token):
    # given: the sweep fails the run while its worker is still generating
    run = _submitted(max_new_tokens=32)
    add = recording.TokenWriter.add

    def add_then_fail(writer, event):
        add(writer, event)
        if event["position"] == len(PROMPT):
            services.run_fail(run_id=run.id, reason="swept")

    # when
    with mock.patch.object(recording.TokenWriter, "add", add_then_fail):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then
    assert finished.status == "failed" and finished.error == "swept"
    assert run.tokens.filter(phase="generated").count() == 1


@pytest.mark.django_db
def test_a_model_gone_since_submit_fails_the_run_with_the_reason(settings, tmp_path):
    # given
    run = _submitted()
    settings.PLAYGROUND_MODELS = {"ouro-tiny": tmp_path / "gone"}

    # when
    finished = execution.run_execute(run_id=run.id, worker="w")
    assert finished is not None

    # then
    assert finished.status == "failed" and "missing" in finished.error


@pytest.mark.django_db
def test_an_engine_error_fails_the_run_with_the_reason():
    # given
    run = _submitted()

    # when
    with mock.patch("workers.batching.batch_submit", side_effect=RuntimeError("CUDA OOM")):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then
    assert finished.status == "failed"
    assert finished.error == "the worker hit an error: RuntimeError"  # its text: the log


@pytest.mark.django_db
def test_cancel_is_checked_at_most_every_few_tens_of_milliseconds():
    # given: a cancel requested before the first generated token
    run = _submitted(max_new_tokens=64)
    add = recording.TokenWriter.add

    def add_then_cancel(writer, event):
        add(writer, event)
        if event["position"] == len(PROMPT) - 1:
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)

    # when
    with mock.patch.object(recording.TokenWriter, "add", add_then_cancel):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then: the first check, after the first generated token, stops it
    assert finished.status == "cancelled"
    assert run.tokens.filter(phase="generated").count() == 1


@pytest.mark.django_db
def test_a_run_whose_tokens_cannot_be_stored_still_ends_failed():
    # given
    run = _submitted()

    # when
    with mock.patch.object(
        recording.TokenWriter, "flush", side_effect=RuntimeError("database is down")
    ):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then
    assert finished.status == "failed" and finished.error == "the worker hit an error: RuntimeError"


@pytest.mark.django_db
def test_the_soft_time_limit_fails_the_run_with_the_reason(settings):
    # given
    from celery.exceptions import SoftTimeLimitExceeded

    run = _submitted()

    # when
    with mock.patch("workers.batching.batch_submit", side_effect=SoftTimeLimitExceeded()):
        finished = execution.run_execute(run_id=run.id, worker="w")
        assert finished is not None

    # then
    assert finished.status == "failed"
    assert f"{settings.PLAYGROUND_SOFT_TIME_LIMIT_S} s time limit" in finished.error


# -- dead workers


def test_stale_running_runs_are_failed_with_the_reason(settings, run_factory):
    # given
    now = timezone.now()
    limit = timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S)
    stale = run_factory(status="running", heartbeat_at=now - limit * 2, worker="w@a")
    fresh = run_factory(status="running", heartbeat_at=now, worker="w@b")

    # when
    failed = services.run_fail_stale()

    # then
    stale.refresh_from_db(), fresh.refresh_from_db()
    assert failed == [stale.id]
    assert stale.status == "failed" and "stopped responding" in stale.error
    assert fresh.status == "running"


def test_a_run_no_worker_takes_is_failed_once_it_has_waited_too_long(settings, run_factory):
    # given
    old = run_factory()
    Run.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S + 1)
    )
    recent = run_factory()

    # when
    failed = services.run_fail_stale()

    # then
    old.refresh_from_db(), recent.refresh_from_db()
    assert failed == [old.id]
    assert old.status == "failed" and "no worker took it" in old.error
    assert recent.status == "queued"


def test_a_restarted_worker_fails_the_runs_its_earlier_process_left(run_factory):
    # given
    mine = run_factory(status="running", heartbeat_at=timezone.now(), worker="w@a")
    other = run_factory(status="running", heartbeat_at=timezone.now(), worker="w@b")

    # when
    services.run_fail_orphans(worker="w@a")

    # then
    mine.refresh_from_db(), other.refresh_from_db()
    assert mine.status == "failed" and "restarted" in mine.error
    assert other.status == "running"


def test_failing_a_finished_run_changes_nothing(run_factory):
    # given
    run = run_factory(status="done")

    # then
    assert services.run_fail(run_id=run.id, reason="late") is False
    run.refresh_from_db()
    assert run.status == "done" and run.error == ""


def test_event_texts_are_stored_with_nul_shown_as_a_symbol():
    # then
    assert event_storable({"text": "a\x00", "top": [[0, "\x00", 0.5]]}) == {
        "text": "a\u2400",
        "top": [[0, "\u2400", 0.5]],
    }


def test_the_submit_vocabularies_are_the_engines():
    from kernels.params import CHOICES
    from kernels.request import GenerationParams
    from kernels.rules import POLICIES

    assert set(CHOICES["kv_policy"]) == set(POLICIES)
    for name in CHOICES["exit_rule"]:  # each name the web accepts builds that engine rule
        assert GenerationParams(exit_rule=name, fixed_loops=2).rule().name == name


# -- the broker, stopping, the end event


@pytest.mark.django_db
@pytest.mark.parametrize("error", [OperationalError("connection refused"), OSError("no route")])
def test_an_unreachable_broker_fails_the_run_with_the_reason(error):
    # given
    run = Run.objects.create(prompt=PROMPT, model="ouro-tiny")
    from workers.celery import app

    # when
    with (
        mock.patch.object(app, "send_task", side_effect=error),
        pytest.raises(services.BrokerUnavailable) as raised,
    ):
        services.run_enqueue(run=run)

    # then
    assert str(raised.value) == (
        "The playground cannot start runs right now: its run queue is unreachable. "
        "Nothing was queued; try again in a minute."
    )
    assert raised.value.__cause__ is error
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == "the run queue (broker) could not be reached"  # its text: the log


def test_cancel_asks_only_that_run_to_stop(run_factory):
    # given
    queued, other_queued = run_factory(), run_factory()
    running = run_factory(status="running", heartbeat_at=timezone.now())
    other_running = run_factory(status="running", heartbeat_at=timezone.now())

    # when
    services.run_cancel(run=queued)
    services.run_cancel(run=running)

    # then the queued one is cancelled at once, the running one asked to stop
    for run in (queued, running, other_queued, other_running):
        run.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("cancelled", True)
    assert queued.finished_at is not None
    assert (running.status, running.cancel_requested) == ("running", True)
    assert (other_queued.status, other_queued.cancel_requested) == ("queued", False)
    assert (other_running.status, other_running.cancel_requested) == ("running", False)


@pytest.mark.services
def test_a_run_cancelled_while_queued_ends_its_stream(run_factory, stream):
    # given
    run = run_factory()

    # when
    services.run_cancel(run=run)

    # then
    ((entry_id, fields),) = stream_entries(stream, run)
    assert entry_id == streams.end_entry_id(-1).encode()
    assert fields[b"event"] == b"done"
    assert json.loads(fields[b"data"])["status"] == "cancelled"


def stream_entries(client, run):
    return client.xrange(streams.stream_key(run.id))


def test_only_the_owner_secret_stops_a_run(run_factory):
    # given a run created with a secret, and one created without
    run = run_factory(owner_hash=secret_hash("s3cret"))
    unowned = run_factory()

    # then anyone else is refused, saying how stopping works
    empty = run_factory(owner_hash=secret_hash(""))  # an empty secret never owns a run
    candidates = [(run, "wrong"), (run, ""), (unowned, ""), (unowned, "s3cret"), (empty, "")]
    for candidate, secret in candidates:
        with pytest.raises(services.NotOwner) as refused:
            services.run_stop(run=candidate, secret=secret)
        assert str(refused.value) == (
            "Only the visitor who started this run can stop it: from the page, the same "
            "browser session; from the API, the cancel_token returned when it was created "
            "(header X-Cancel-Token)."
        )
    assert services.run_owned(run=run, secret="s3cret")
    assert not services.run_owned(run=unowned, secret="")
    run.refresh_from_db()
    assert run.status == "queued" and not run.cancel_requested

    # and the owner stops it
    assert services.run_stop(run=run, secret="s3cret").status == "cancelled"


@pytest.mark.parametrize("status", ["done", "cancelled"])
def test_a_finished_run_ends_its_stream_with_done_and_its_stats(run_factory, status):
    run = run_factory(status=status, stats={"tokens": 3}, error="")

    assert services.run_end_event(run) == (
        "done",
        {"status": status, "stats": {"tokens": 3}, "error": ""},
    )


def test_a_failed_run_ends_its_stream_with_an_error(run_factory):
    run = run_factory(status="failed", stats={"tokens": 3}, error="the worker died")

    assert services.run_end_event(run) == (
        "error",
        {"status": "failed", "error": "the worker died"},
    )


def test_a_restarted_worker_fails_only_its_running_runs(run_factory):
    # given the worker's running run, and its queued and finished ones
    running = run_factory(status="running", heartbeat_at=timezone.now(), worker="w@a")
    queued = run_factory(worker="w@a")
    done = run_factory(status="done", worker="w@a")

    # when
    failed = services.run_fail_orphans(worker="w@a")

    # then
    assert failed == [running.id]
    for run in (running, queued, done):
        run.refresh_from_db()
    assert running.error == "the worker running it was restarted mid-run"
    assert (queued.status, done.status) == ("queued", "done")


def test_a_restarted_worker_leaves_a_run_another_worker_took_meanwhile(run_factory):
    # given a run the restarted worker held, taken over before it is failed
    run = run_factory(status="running", heartbeat_at=timezone.now(), worker="w@a")
    fail = services.run_fail

    def taken_over_then_fail(**kwargs):
        Run.objects.filter(pk=run.pk).update(worker="w@b")
        return fail(**kwargs)

    # when
    with mock.patch.object(services, "run_fail", taken_over_then_fail):
        failed = services.run_fail_orphans(worker="w@a")

    # then
    assert failed == []
    run.refresh_from_db()
    assert (run.status, run.worker) == ("running", "w@b")


def test_each_stale_run_is_failed_with_its_worker_named_in_the_log_only(
    settings, run_factory, caplog
):
    # given two running runs whose workers went quiet, one of them unnamed
    beat = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S * 2)
    named = run_factory(status="running", heartbeat_at=beat, worker="w@a")
    unnamed = run_factory(status="running", heartbeat_at=beat, worker="")

    # when
    with caplog.at_level("WARNING", logger="playground.services"):
        failed = services.run_fail_stale()

    # then
    assert sorted(failed) == sorted([named.id, unnamed.id])
    named.refresh_from_db(), unnamed.refresh_from_db()
    limit = settings.PLAYGROUND_STALE_AFTER_S
    for run, worker in [(named, "w@a"), (unnamed, "none")]:
        assert run.error == (
            f"the worker running it stopped responding for over {limit} s; it was lost mid-run"
        )
        assert run.finished_at is not None
        assert f"run {run.id} failed: {run.error}" in caplog.messages
        assert f"run {run.id} was on worker {worker}" in caplog.messages


def test_a_queued_run_no_worker_took_is_failed_saying_so(settings, run_factory):
    run = run_factory()
    waited = timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S + 1)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - waited)

    services.run_fail_stale()

    run.refresh_from_db()
    assert run.error == (
        f"no worker took it within {settings.PLAYGROUND_QUEUED_TIMEOUT_S} s "
        "(is a worker running on queue gpu?)"
    )


def test_staleness_is_judged_at_the_time_given(settings, run_factory):
    # given a run that beat just now, and a time past its staleness limit
    run = run_factory(status="running", heartbeat_at=timezone.now())
    later = timezone.now() + timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)

    # then it is stale then, not now
    assert services.run_fail_stale() == []
    assert services.run_fail_stale(now=later) == [run.id]


@pytest.mark.services
def test_a_failed_run_ends_its_stream_with_the_error(run_factory, stream):
    # given
    run = run_factory(tokens=3, status="running", heartbeat_at=timezone.now())

    # when
    assert services.run_fail(run_id=run.id, reason="the GPU fell off")

    # then the end entry comes after its last stored position
    ((entry_id, fields),) = stream_entries(stream, run)
    assert entry_id == streams.end_entry_id(2).encode()
    assert fields[b"event"] == b"error"
    assert json.loads(fields[b"data"]) == {"status": "failed", "error": "the GPU fell off"}


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        ({"prompt": "  "}, {"prompt": ["must not be blank"]}),
        ({"prompt": "a\x00b"}, {"prompt": ["must not contain NUL characters"]}),
        ({"prompt": "ab", "q": 0}, {"q": ["must lie in (0, 1]"]}),
    ],
)
def test_each_refusal_says_what_is_wrong(values, errors):
    with pytest.raises(ValidationError) as caught:
        services.run_params_clean(**values)

    assert caught.value.message_dict == errors


def test_a_prompt_of_the_most_characters_is_not_too_long():
    # the tiny model's 512 positions refuse it by tokens, not by characters
    with pytest.raises(ValidationError) as caught:
        services.run_params_clean(prompt="x" * services.MAX_PROMPT_CHARS)

    assert caught.value.message_dict["prompt"] == [
        "2000 tokens + max_new_tokens 64 exceed the 512 positions of ouro-tiny"
    ]
    with pytest.raises(ValidationError) as caught:
        services.run_params_clean(prompt="x" * (services.MAX_PROMPT_CHARS + 1))
    assert "at most 2000 characters" in caught.value.message_dict["prompt"]


@pytest.mark.parametrize(
    ("models", "configured"),
    [({"tiny": TINY, "other": TINY}, "tiny, other"), ({}, "none")],
)
def test_an_unknown_model_is_refused_naming_the_configured_ones(settings, models, configured):
    settings.PLAYGROUND_MODELS = models

    with pytest.raises(ValidationError) as caught:
        services.run_params_clean(prompt=PROMPT, model="nope")

    assert caught.value.message_dict == {
        "model": [f"no model named 'nope'; configured: {configured}"]
    }


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        (
            {"loops": 5},
            {
                "loops": [
                    "ouro-tiny was trained with 4 loops; going beyond needs extrapolate (up to 8)"
                ]
            },
        ),
        ({"loops": 9, "extrapolate": True}, {"loops": ["at most 8 (2 × T)"]}),
        ({"exit_rule": "fixed", "fixed_loops": 9}, {"fixed_loops": ["at most 8"]}),
    ],
)
def test_loops_past_what_the_model_allows_are_refused_saying_its_bounds(values, errors):
    with pytest.raises(ValidationError) as caught:
        services.run_params_clean(prompt=PROMPT, **values)

    assert caught.value.message_dict == errors


@pytest.mark.parametrize(
    "values",
    [
        {"loops": 4},  # the trained T
        {"loops": 8, "extrapolate": True},  # 2 × T
        {"exit_rule": "fixed", "fixed_loops": 8},
        {"max_new_tokens": 64},  # with a prompt of 512 − 64 tokens: every position used
    ],
)
def test_the_model_bounds_themselves_are_allowed(values):
    prompt = "x" * (512 - 64) if "max_new_tokens" in values else PROMPT

    info, params = services.run_params_clean(prompt=prompt, **values)

    assert info.name == "ouro-tiny"
    assert params | values == params


def test_a_stale_queued_run_claimed_meanwhile_is_not_failed_as_never_taken(settings, run_factory):
    # given a queued run past its wait, claimed by a worker as the sweep reaches it
    run = run_factory()
    waited = timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S + 1)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - waited)
    beat = timezone.now() - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S * 2)
    fail = services._fail

    def claimed_then_fail(runs, **kwargs):
        Run.objects.filter(pk=run.pk).update(status="running", heartbeat_at=beat, worker="w")
        return fail(runs, **kwargs)

    # when
    with mock.patch.object(services, "_fail", claimed_then_fail):
        failed = services.run_fail_stale()

    # then it is left to a later sweep, which judges it as the running run it now is
    assert failed == []
    run.refresh_from_db()
    assert (run.status, run.error) == ("running", "")
