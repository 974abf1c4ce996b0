import pytest
from django.db import IntegrityError

from playground.models import Run, RunToken
from tests.playground.conftest import make_event


def test_a_run_reads_as_its_model_status_and_prompt(run_factory):
    # given
    run = run_factory(prompt="x" * 100)

    # then
    assert str(run).startswith(f"ouro-tiny run {str(run.id)[:8]} (queued): 'xxx")
    assert str(run).endswith("…'")


def test_a_run_links_to_its_permalink_and_its_events(run_factory):
    # given
    run = run_factory()

    # then
    assert run.get_absolute_url() == f"/playground/runs/{run.id}/"
    assert run.get_events_url() == f"/runs/{run.id}/events"


def test_runs_are_listed_newest_first(run_factory):
    # given
    older, newer = run_factory(), run_factory()

    # then
    assert list(Run.objects.all()) == [newer, older]


def test_finished_covers_done_cancelled_and_failed(run_factory):
    # given
    runs = {status: run_factory(status=status) for status in Run.Status.values}

    # then
    assert {status for status, run in runs.items() if run.finished} == {
        "done",
        "cancelled",
        "failed",
    }


def test_a_position_is_stored_once_per_run(run_factory):
    # given
    run = run_factory(tokens=1)
    token = RunToken.objects.get()

    # then
    assert str(token) == "0: 'a' (exit 2)"
    assert token.get_absolute_url() == f"/playground/runs/{run.id}/#t0"
    with pytest.raises(IntegrityError):
        RunToken.objects.create(
            run=run,
            position=0,
            phase="prompt",
            token_id=1,
            text="b",
            exit_loop=1,
            loops_computed=1,
            data={},
        )


def test_a_run_shows_a_prompt_of_forty_characters_whole_and_cuts_a_longer_one(run_factory):
    # given
    whole, cut = run_factory(prompt="y" * 40), run_factory(prompt="z" * 41)

    # then
    assert str(whole) == f"ouro-tiny run {str(whole.id)[:8]} (queued): '{'y' * 40}'"
    assert str(cut) == f"ouro-tiny run {str(cut.id)[:8]} (queued): '{'z' * 39}…'"


def test_a_token_row_is_made_from_its_event(run_factory):
    # given
    run = run_factory()
    event = make_event(7, phase="prompt", exit_loop=3)

    # when
    token = RunToken.from_event(run, event)

    # then
    assert token.pk is None
    assert (token.run, token.position, token.phase) == (run, 7, "prompt")
    assert (token.token_id, token.text) == (event["token_id"], event["text"])
    assert (token.exit_loop, token.loops_computed, token.data) == (3, 3, event)
