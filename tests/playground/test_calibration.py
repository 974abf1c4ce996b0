"""Settling loops on run pages and in the compare view, and "compare with full depth"."""

import pytest

from playground import services
from playground.calibration import calibration_display, run_calibration, token_settling
from playground.comparison import runs_compare
from playground.models import Run, RunToken
from playground.siblings import TEXT_OF
from tests.playground.conftest import make_event


def _full(position: int, top1: list[int], exit_loop: int | None = None) -> dict:
    """A position that computed every loop (4), with the given top-1 per loop."""
    event = make_event(position, "prompt" if position < 2 else "generated", exit_loop=4)
    for row, token in zip(event["loops"], top1, strict=True):
        row["top"] = [[token, chr(token), 0.5]]
    event["exit_loop"] = exit_loop or 4
    return event


def _stored(run: Run, events: list[dict]) -> Run:
    RunToken.objects.bulk_create([RunToken.from_event(run, event) for event in events])
    return run


def test_a_position_has_a_settling_loop_only_when_every_loop_ran() -> None:
    assert token_settling(_full(0, [1, 2, 3, 3]), 4) == 3
    assert token_settling(_full(0, [1, 2, 3, 3]) | {"settling_loop": 2}, 4) == 2  # as stored
    assert token_settling(make_event(0, exit_loop=2), 4) is None  # skipped loops 3 and 4


def test_a_full_depth_runs_calibration_counts_its_positions() -> None:
    # given four positions exiting at 4 (full depth) that settle at 1, 3, 4 and 4
    events = [
        _full(0, [5, 5, 5, 5]),
        _full(1, [1, 2, 3, 3]),
        _full(2, [1, 1, 1, 2]),
        _full(3, [7, 7, 7, 8]),
    ]
    found = run_calibration(events, 4)
    assert found is not None
    assert (found.after, found.at, found.before) == (2, 2, 0)
    assert found.wasted_loops == 3 + 1 and found.executed_loops == 16
    assert calibration_display(found) == (
        "after 50% · at 50% · before 0% of 4 positions; 4 loops past settling "
        "(25.0% of the executed loops)"
    )
    assert run_calibration([make_event(0)], 4) is None


@pytest.mark.django_db
def test_a_full_depth_run_page_shows_settling_rings_and_its_calibration(
    client, run_factory
) -> None:
    # given a q = 1 run whose positions settle at loops 1 and 3
    run = run_factory(status=Run.Status.DONE, params={"q": 1.0, "max_new_tokens": 2})
    _stored(run, [_full(0, [5, 5, 5, 5]), _full(1, [1, 2, 3, 3])])
    # when its page is read
    html = client.get(run.get_absolute_url()).content.decode()
    # then the stats give its calibration, and no full-depth sibling is offered
    assert "after 100% · at 0% · before 0% of 2 positions; 4 loops past settling" in html
    assert "Compare with full depth" not in html
    assert '"name": "settling loop (oracle exit)"' in html and '"y": [1, 3]' in html


@pytest.mark.django_db
def test_compare_with_full_depth_starts_a_sibling_that_computes_every_loop(
    client, run_factory, django_capture_on_commit_callbacks
) -> None:
    # given a finished run that skipped loops, whose page offers the full-depth sibling
    run = _stored(
        run_factory(status=Run.Status.DONE, params={"q": 0.5, "top_k": 0}),
        [make_event(i, exit_loop=2) for i in range(3)],
    )
    page = client.get(run.get_absolute_url()).content.decode()
    assert f"/playground/runs/{run.id}/full-depth/" in page
    # when it is clicked
    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        response = client.post(f"/playground/runs/{run.id}/full-depth/")
    # then one sibling runs every loop of the run's T, with a lens, on the run's own text
    (sibling,) = Run.objects.filter(compare_of=run)
    assert len(enqueued) == 1 and response.status_code == 302
    assert response["Location"] == f"/playground/compare/?runs={run.id},{sibling.id}"
    params = sibling.params
    assert (params["exit_rule"], params["fixed_loops"], params["top_k"]) == ("fixed", 4, 1)
    assert params[TEXT_OF] == str(run.id) and params["q"] == 0.5
    assert sibling.visitor.startswith("session:")


@pytest.mark.django_db
def test_a_running_run_gets_a_free_running_full_depth_sibling(run_factory) -> None:
    run = run_factory(status=Run.Status.RUNNING)
    sibling = services.run_full_depth_submit(run=run, visitor="session:v")
    assert TEXT_OF not in sibling.params and sibling.params["exit_rule"] == "fixed"


@pytest.mark.django_db
def test_the_compare_view_sets_the_exits_against_the_full_depth_settling_loops(
    client, run_factory
) -> None:
    # given a run exiting at 1, 2, 4 and its full-depth sibling settling at 2, 2, 1
    run = _stored(
        run_factory(status=Run.Status.DONE),
        [make_event(i, exit_loop=e) for i, e in enumerate([1, 2, 4])],
    )
    full = _stored(
        run_factory(status=Run.Status.DONE, compare_of=run),
        [
            _full(i, top1) | {"token_id": 97 + i}
            for i, top1 in enumerate([[1, 2, 2, 2], [1, 2, 2, 2], [3, 3, 3, 3]])
        ],
    )
    # when the two are compared
    comparison = runs_compare(raw=f"{run.id},{full.id}")
    # then the full-depth run is the oracle and the run's exits are one before, at, after
    assert comparison.settled == 1
    assert [loop for _, loop in comparison.settling_row] == [2, 2, 1]
    found = comparison.calibration(0)
    assert found is not None and (found.before, found.at, found.after) == (1, 1, 1)
    assert found.wasted_loops == 3
    html = client.get(f"/playground/compare/?runs={run.id},{full.id}").content.decode()
    assert 'id="settling-row"' in html and "Settling loop (run B)" in html
    assert "after 33% · at 33% · before 33% of 3 positions" in html
    api = client.get(f"/api/v1/runs/compare/?runs={run.id},{full.id}").json()
    assert api["settled"] == str(full.id)
    assert api["runs"][0]["calibration"]["before"] == 1
    assert [p["settling_loop"] for p in api["positions"]] == [2, 2, 1]
