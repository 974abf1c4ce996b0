import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import exits

lambdas_st = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8)
q_st = st.floats(0.0, 1.0, exclude_min=True)
q_below_one_st = st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)


def test_seed_toy_numbers():
    # given the seed's conditionals, the last one forced
    lam = [0.2, 0.5, 1.0]

    # then
    assert exits.stopping_distribution(lam) == pytest.approx([0.2, 0.4, 0.4])
    assert exits.cumulative(lam) == pytest.approx([0.2, 0.6, 1.0])
    assert exits.expected_depth(lam) == pytest.approx(2.2)
    assert exits.q_exit(lam, 0.5) == 2
    assert exits.q_exit(lam, 0.9) == 3


def test_last_loop_takes_the_remainder_whatever_its_lambda():
    assert exits.stopping_distribution([0.2, 0.5, 0.0]) == pytest.approx([0.2, 0.4, 0.4])


@given(lambdas_st)
def test_distribution_is_non_negative_and_sums_to_one(lam):
    p = exits.stopping_distribution(lam)

    assert all(mass >= 0 for mass in p)
    assert math.fsum(p) == pytest.approx(1.0)


@given(lambdas_st)
def test_cumulative_is_monotone_and_ends_at_one(lam):
    cum = exits.cumulative(lam)

    assert all(a <= b for a, b in zip(cum, cum[1:], strict=False))
    assert cum[-1] == pytest.approx(1.0)


@given(lambdas_st)
def test_q_one_is_full_depth(lam):
    # even where the cumulative reaches 1 early (a λ of 1): q = 1 is full depth by definition
    assert exits.q_exit(lam, 1.0) == len(lam)
    assert exits.q_exit(torch.tensor([lam]), 1.0).tolist() == [len(lam)]


@given(lambdas_st, q_below_one_st)
def test_q_exit_is_the_first_loop_reaching_q(lam, q):
    t = exits.q_exit(lam, q)
    cum = exits.cumulative(lam)

    assert 1 <= t <= len(lam)
    assert all(value < q for value in cum[: t - 1])
    assert t == len(lam) or cum[t - 1] >= q


@given(lambdas_st, q_st, q_st)
def test_a_larger_q_never_exits_earlier(lam, q1, q2):
    lo, hi = sorted((q1, q2))

    assert exits.q_exit(lam, lo) <= exits.q_exit(lam, hi)


@settings(deadline=None)  # torch's first calls are slow on a busy machine
@given(
    st.lists(st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4), min_size=1, max_size=5), q_st
)
def test_tensor_version_matches_the_python_version(rows, q):
    tensor = torch.tensor(rows, dtype=torch.float64)

    torch.testing.assert_close(
        exits.stopping_distribution(tensor),
        torch.tensor([exits.stopping_distribution(r) for r in rows], dtype=torch.float64),
    )
    assert exits.q_exit(tensor, q).tolist() == [exits.q_exit(r, q) for r in rows]
    torch.testing.assert_close(
        exits.expected_depth(tensor),
        torch.tensor([exits.expected_depth(r) for r in rows], dtype=torch.float64),
    )


@pytest.mark.parametrize("bad", [[], [0.2, 1.5], [-0.1], [float("nan")]])
def test_invalid_lambdas_raise(bad):
    with pytest.raises(ValueError):
        exits.stopping_distribution(bad)
    with pytest.raises(ValueError):
        exits.q_exit(torch.tensor(bad if bad else [[]]), 0.5)


@pytest.mark.parametrize("q", [0.0, -0.5, 1.01, float("nan")])
def test_q_outside_zero_one_raises(q):
    with pytest.raises(ValueError, match="q must lie"):
        exits.q_exit([0.3, 0.4], q)


def test_matches_the_reference_exit_distribution(reference):
    # given the reference's gate values, loops first: (T, B, S)
    lam = reference["gate_lambda"].movedim(0, -1)

    # when
    pdf = exits.stopping_distribution(lam)
    steps = torch.stack([exits.q_exit(lam, float(q)) for q in reference["thresholds"]])

    # then (the reference numbers loops from 0)
    torch.testing.assert_close(pdf.movedim(-1, 0), reference["exit_pdf"], atol=1e-6, rtol=0)
    torch.testing.assert_close(
        pdf.cumsum(-1).movedim(-1, 0), reference["exit_cdf"], atol=1e-6, rtol=0
    )
    assert torch.equal(steps - 1, reference["threshold_exit_steps"])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([], "expected at least one conditional exit probability"),
        ([0.2, 1.5], r"conditional exit probabilities must lie in \[0, 1\]"),
        (torch.tensor(0.5), r"expected at least one loop \(a non-empty last dimension\)"),
        (torch.zeros(2, 0), r"expected at least one loop \(a non-empty last dimension\)"),
        (torch.tensor([[0.2, -0.1]]), r"conditional exit probabilities must lie in \[0, 1\]"),
    ],
)
def test_invalid_lambdas_are_refused_saying_why(bad, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        exits.stopping_distribution(bad)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1, 3)])
def test_tensors_of_any_batch_shape_reduce_over_their_last_dimension(shape):
    # given the seed's toy in every row, loops last
    lam = torch.tensor([0.2, 0.5, 1.0]).expand(shape)
    # then
    assert exits.q_exit(lam, 0.5).shape == shape[:-1]
    assert (exits.q_exit(lam, 0.5) == 2).all() and (exits.q_exit(lam, 1.0) == 3).all()
    torch.testing.assert_close(exits.expected_depth(lam), torch.full(shape[:-1], 2.2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gates_are_computed_in_float32(dtype):
    # given λ that bfloat16/float16 cannot carry through a product of (1 − λ) exactly
    lam = torch.tensor([[0.1, 0.3, 0.7, 1.0]], dtype=dtype)
    # then the masses come back in float32, exact for the values the gates hold
    p = exits.stopping_distribution(lam)
    assert p.dtype == torch.float32
    torch.testing.assert_close(p, exits.stopping_distribution(lam.float()), atol=0, rtol=0)


def test_step_mass_gives_each_token_its_mass_at_its_own_loop():
    # given three tokens, the last of them at its last loop
    lam = torch.tensor([0.2, 0.5, 0.3])
    remaining = torch.tensor([1.0, 0.8, 0.5])
    is_last = torch.tensor([False, False, True])

    # when
    mass, rest = exits.step_mass(lam, remaining, is_last)

    # then a going-on token stops with λ of what remains; the last loop takes it all
    assert mass.tolist() == pytest.approx([0.2, 0.4, 0.5])
    assert rest.tolist() == pytest.approx([0.8, 0.4, 0.0])


def test_step_mass_at_the_last_loop_leaves_nothing():
    assert exits.step_mass(0.3, 0.5, is_last=True) == (0.5, 0.0)
    assert exits.step_mass(0.3, 0.5, is_last=False) == pytest.approx((0.15, 0.35))
