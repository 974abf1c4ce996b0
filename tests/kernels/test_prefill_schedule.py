"""The prefill schedule: chunks in position order, each loop by loop until it stops."""

import pytest

from kernels.scheduler import ChunkStep, PrefillSchedule


def run(schedule, going_on):
    """Every step planned, answering ``going_on(step)`` after each."""
    steps = []
    while (step := schedule.plan()) is not None:
        steps.append(step)
        schedule.advance(step, going_on(step))
    return steps


def test_chunks_run_in_position_order_each_until_no_position_runs_on():
    # given 7 positions in chunks of 3, where the second chunk stops after loop 2
    schedule = PrefillSchedule(7, 3, n_loops=4)

    # when
    steps = run(schedule, lambda step: step.start != 3 or step.loop < 2)

    # then
    assert [(s.start, s.stop, s.loop) for s in steps] == [
        (0, 3, 1),
        (0, 3, 2),
        (0, 3, 3),
        (0, 3, 4),
        (3, 6, 1),
        (3, 6, 2),
        (6, 7, 1),
        (6, 7, 2),
        (6, 7, 3),
        (6, 7, 4),
    ]


def test_a_chunk_never_runs_past_the_loop_cap_and_one_chunk_covers_a_short_prompt():
    steps = run(PrefillSchedule(4, 10, n_loops=2), lambda step: True)

    assert steps == [ChunkStep(0, 4, 1), ChunkStep(0, 4, 2)]


def test_a_chunk_of_one_position_steps_through_the_prompt_a_token_at_a_time():
    steps = run(PrefillSchedule(3, 1, n_loops=3), lambda step: False)

    assert steps == [ChunkStep(0, 1, 1), ChunkStep(1, 2, 1), ChunkStep(2, 3, 1)]


def test_an_empty_chunk_is_refused_and_steps_run_in_the_planned_order():
    with pytest.raises(ValueError, match="at least one position"):
        PrefillSchedule(3, 0, n_loops=2)
    schedule = PrefillSchedule(3, 2, n_loops=2)
    with pytest.raises(AssertionError):
        schedule.advance(ChunkStep(2, 3, 1), True)
