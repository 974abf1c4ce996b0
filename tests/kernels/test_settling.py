import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernels.settling import calibration, settling_loop


@pytest.mark.parametrize(
    ("top1", "expected"),
    [
        ([7, 7, 7, 7], 1),  # settled from the first loop
        ([1, 2, 3, 7], 4),  # only the last loop has it
        ([7, 2, 7, 2, 7], 5),  # flips back and forth: settles only at the end
        ([7, 2, 7, 7], 3),  # agreed at 1, flipped away, settled at 3
        ([1, 1, 1, 2], 4),  # stable early, never agrees before T
        ([9], 1),  # one loop
    ],
)
def test_settling_loop_on_hand_made_traces(top1, expected):
    assert settling_loop(top1) == expected


def test_settling_loop_refuses_an_empty_trace():
    with pytest.raises(ValueError):
        settling_loop([])


@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_settling_loop_is_the_first_loop_of_the_final_run(top1):
    # when
    s = settling_loop(top1)

    # then every loop from s on agrees with the last, and the one before does not
    assert all(t == top1[-1] for t in top1[s - 1 :])
    assert s == 1 or top1[s - 2] != top1[-1]


def test_calibration_counts_after_at_before_and_waste():
    # given (exit, settle) pairs: two after (waste 2 + 1), one at, one before
    pairs = [(4, 2), (3, 2), (2, 2), (1, 3)]

    # when
    cal = calibration(pairs)

    # then
    assert (cal.positions, cal.after, cal.at, cal.before) == (4, 2, 1, 1)
    assert (cal.after_share, cal.at_share, cal.before_share) == (0.5, 0.25, 0.25)
    assert cal.wasted_loops == 3
    assert cal.executed_loops == 10
    assert cal.wasted_share == pytest.approx(0.3)


def test_calibration_of_nothing_is_all_zero():
    cal = calibration([])
    assert cal.positions == 0
    assert cal.as_dict()["after_share"] == 0.0 and cal.wasted_share == 0.0


def test_calibration_refuses_loop_zero():
    with pytest.raises(ValueError):
        calibration([(0, 1)])


pairs_st = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=30)


@given(pairs_st)
def test_calibration_shares_add_to_one_and_match_a_direct_count(pairs):
    # when
    cal = calibration(pairs)

    # then
    n = len(pairs)
    assert cal.after_share + cal.at_share + cal.before_share == pytest.approx(1.0)
    assert cal.after_share == pytest.approx(sum(e > s for e, s in pairs) / n)
    assert cal.at_share == pytest.approx(sum(e == s for e, s in pairs) / n)
    assert cal.before_share == pytest.approx(sum(e < s for e, s in pairs) / n)
    assert cal.wasted_loops == sum(e - s for e, s in pairs if e > s)
