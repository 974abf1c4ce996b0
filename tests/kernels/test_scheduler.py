"""The decode scheduler on its own: plain Python, no model."""

import pytest

from kernels.rules import QExit, kv_policy
from kernels.scheduler import Done, RowSettings, Scheduler


def settings(n_loops: int = 4, max_new_tokens: int = 3, eos: int | None = None) -> RowSettings:
    return RowSettings(
        rule=QExit(0.5),
        policy=kv_policy("best-available"),
        n_loops=n_loops,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
    )


def step(scheduler: Scheduler, stops: dict[int, bool]) -> list[Done]:
    """One step in which the planned rows stop as ``stops`` says (rows not named go on)."""
    plan = scheduler.plan()
    assert plan is not None
    return scheduler.advance(plan, [stops.get(r, False) for r in plan.rows])


def test_rows_are_free_until_a_request_takes_one():
    scheduler = Scheduler(max_rows=3)
    assert scheduler.free_row() == 0
    assert not scheduler.busy
    assert scheduler.plan() is None

    scheduler.start(0, "a", settings(), token=7, position=5)
    scheduler.start(2, "c", settings(), token=8, position=2)

    assert scheduler.free_row() == 1
    assert scheduler.busy
    assert scheduler.row_of("c") == 2
    assert scheduler.row_of("a") == 0
    assert scheduler.row_of("b") is None


def test_a_full_scheduler_has_no_free_row():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=1, position=0)
    scheduler.start(1, "b", settings(), token=1, position=0)

    assert scheduler.free_row() is None


def test_a_held_row_cannot_be_taken():
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(), token=1, position=0)

    with pytest.raises(ValueError, match="row 0 is serving request 'a'"):
        scheduler.start(0, "b", settings(), token=1, position=0)
    assert scheduler.row_of("a") == 0


def test_cancel_frees_the_row_of_that_request_only():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=1, position=0)
    scheduler.start(1, "b", settings(), token=1, position=0)

    assert scheduler.cancel("b") == 1
    assert scheduler.cancel("b") is None
    assert scheduler.rows[1] is None
    assert scheduler.row_of("a") == 0
    assert scheduler.free_row() == 1


def test_a_plan_names_each_row_at_its_own_loop_with_its_cap_and_position():
    # given two requests, the second joining after the first computed one loop
    scheduler = Scheduler(max_rows=3)
    first, second = settings(n_loops=4), settings(n_loops=2)
    scheduler.start(2, "a", first, token=5, position=9)
    step(scheduler, {})
    scheduler.start(0, "b", second, token=6, position=3)

    plan = scheduler.plan()

    assert plan is not None
    assert plan.rows == [0, 2]
    assert plan.loops == [1, 2]
    assert plan.caps == [2, 4]
    assert plan.positions == [3, 9]
    assert plan.settings == [second, first]


def test_a_going_on_token_moves_to_its_next_loop():
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(), token=5, position=0)

    assert step(scheduler, {}) == []
    assert step(scheduler, {}) == []

    plan = scheduler.plan()
    assert plan is not None and plan.loops == [3]
    assert scheduler.advance(plan, [True]) == [
        Done(row=0, key="a", position=0, token=5, loops_computed=3, finished=False)
    ]


def test_a_stopped_token_waits_for_the_next_one_and_is_not_planned():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=5, position=4)
    scheduler.start(1, "b", settings(), token=6, position=1)

    (done,) = step(scheduler, {0: True})

    assert done == Done(row=0, key="a", position=4, token=5, loops_computed=1, finished=False)
    assert scheduler.row_of("a") == 0  # the row is kept for its next token
    plan = scheduler.plan()
    assert plan is not None and plan.rows == [1]


def test_the_next_token_starts_at_loop_one_at_the_next_position():
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(max_new_tokens=5), token=5, position=4)
    step(scheduler, {})
    step(scheduler, {0: True})

    scheduler.next_token(0, 11)

    plan = scheduler.plan()
    assert plan is not None
    assert (plan.rows, plan.loops, plan.positions) == ([0], [1], [5])
    (done,) = step(scheduler, {0: True})
    assert done == Done(row=0, key="a", position=5, token=11, loops_computed=1, finished=False)


def test_only_a_waiting_row_takes_a_next_token():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=5, position=0)

    with pytest.raises(AssertionError, match="row 0 is not waiting"):
        scheduler.next_token(0, 6)
    with pytest.raises(AssertionError, match="row 1 is not waiting"):
        scheduler.next_token(1, 6)


def test_a_request_finishes_when_its_token_budget_is_spent():
    # given a request of three tokens (its first sampled token counts)
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(max_new_tokens=3), token=1, position=0)
    finished = []
    for token in (2, 3):
        (done,) = step(scheduler, {0: True})
        finished.append(done.finished)
        scheduler.next_token(0, token)

    (last,) = step(scheduler, {0: True})

    assert finished == [False, False]
    assert last == Done(row=0, key="a", position=2, token=3, loops_computed=1, finished=True)
    assert scheduler.rows[0] is None
    assert not scheduler.busy


def test_a_one_token_request_finishes_with_its_first_token():
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(max_new_tokens=1), token=1, position=0)

    (done,) = step(scheduler, {0: True})

    assert done.finished
    assert scheduler.free_row() == 0


def test_a_request_finishes_at_its_end_token():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(max_new_tokens=9, eos=0), token=0, position=0)
    scheduler.start(1, "b", settings(max_new_tokens=9, eos=0), token=4, position=0)

    done = step(scheduler, {0: True, 1: True})

    assert [d.finished for d in done] == [True, False]
    assert scheduler.rows[0] is None
    assert scheduler.row_of("b") == 1


def test_no_end_token_finishes_only_by_budget():
    scheduler = Scheduler(max_rows=1)
    scheduler.start(0, "a", settings(max_new_tokens=9, eos=None), token=0, position=0)

    (done,) = step(scheduler, {0: True})

    assert not done.finished


def test_advance_takes_one_stop_per_planned_row():
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=1, position=0)
    scheduler.start(1, "b", settings(), token=1, position=0)
    plan = scheduler.plan()
    assert plan is not None

    with pytest.raises(ValueError):
        scheduler.advance(plan, [True])


def test_a_dense_plan_keeps_a_waiting_row_idle_where_its_token_stopped():
    # given row 1's token stopped at loop 2 while rows 0 and 2 go on
    scheduler = Scheduler(max_rows=3)
    for row, key in enumerate("abc"):
        scheduler.start(row, key, settings(n_loops=4 + row), token=row, position=3 + row)
    step(scheduler, {})
    step(scheduler, {1: True})

    # when the step is planned dense (as a lockstep static batch computes it)
    plan = scheduler.plan(dense=True)

    # then every row is planned in row order, the waiting one idle at its stopped loop
    assert plan is not None
    assert (plan.rows, plan.loops, plan.caps, plan.positions) == (
        [0, 1, 2],
        [3, 2, 3],
        [4, 5, 6],
        [3, 4, 5],
    )
    assert plan.idle == (1,) and plan.live_index == [0, 2]
    live = plan.live()
    assert (live.rows, live.loops, live.caps, live.positions) == ([0, 2], [3, 3], [4, 6], [3, 5])
    assert [s.n_loops for s in live.settings] == [4, 6]
    assert live.idle == ()
    # and a plan that is not dense leaves the waiting row out
    plain = scheduler.plan()
    assert plain is not None and plain.rows == [0, 2] and plain.idle == ()


def test_advance_of_a_dense_plan_takes_stops_of_its_live_rows_only():
    # given row 0 waiting for its next token and row 1 going on
    scheduler = Scheduler(max_rows=2)
    scheduler.start(0, "a", settings(), token=1, position=0)
    scheduler.start(1, "b", settings(), token=2, position=0)
    step(scheduler, {0: True})
    plan = scheduler.plan(dense=True)
    assert plan is not None and plan.idle == (0,)

    # when the live row stops
    (done,) = scheduler.advance(plan, [True])

    # then it alone is reported, and the idle row still waits at its loop
    assert (done.row, done.loops_computed) == (1, 2)
    assert scheduler.plan(dense=True) is None
    with pytest.raises(ValueError):
        scheduler.advance(plan, [True, True])
