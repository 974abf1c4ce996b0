import pytest
import torch

from kernels.rules import ACT, Convergence, Fixed, LoopSignals, Ponder, QExit, halting_uniform


def signals(t, n_loops, cumulative, kl=None) -> LoopSignals:
    n = len(t)
    return LoopSignals(
        t=torch.tensor(t),
        n_loops=torch.tensor(n_loops),
        cumulative=torch.tensor(cumulative),
        kl=None if kl is None else torch.tensor(kl),
        gate=torch.full((n,), 0.5),
        gate_sum=torch.full((n,), 0.5),
        seed=torch.zeros(n, dtype=torch.long),
        position=torch.arange(n),
    )


def test_q_exit_uses_the_cumulative_and_each_tokens_own_cap():
    # given the seed's toy cumulative (0.2, 0.6, 1.0) at loops 1..3, and a row capped at 2
    s = signals(t=[1, 2, 3, 2], n_loops=[3, 3, 3, 2], cumulative=[0.2, 0.6, 1.0, 0.3])
    # then q = 0.5 stops at loop 2; the capped row stops at its cap whatever its mass
    assert QExit(0.5).exits(s).tolist() == [False, True, True, True]
    assert QExit(1.0).exits(s).tolist() == [False, False, True, True]


def test_convergence_and_fixed_per_token():
    s = signals(
        t=[1, 2, 2, 4],
        n_loops=[4, 4, 4, 4],
        cumulative=[0.0] * 4,
        kl=[float("nan"), 1e-4, 1.0, 1.0],
    )
    assert Convergence(1e-3).exits(s).tolist() == [False, True, False, True]
    assert Fixed(2).exits(s).tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match="KL"):
        Convergence(1e-3).exits(signals([1], [4], [0.0]))


def test_select_keeps_the_chosen_tokens_signals():
    s = signals(t=[1, 2, 3], n_loops=[3, 3, 3], cumulative=[0.1, 0.2, 0.3])
    picked = s.select(torch.tensor([2, 0]))
    assert picked.t.tolist() == [3, 1] and picked.kl is None
    assert picked.position.tolist() == [2, 0]


def test_act_stops_once_the_gates_sum_to_one_minus_eps():
    s = signals(t=[1, 2, 3, 2], n_loops=[4, 4, 4, 2], cumulative=[0.0] * 4)
    s = LoopSignals(**{**vars(s), "gate_sum": torch.tensor([0.5, 0.98, 0.995, 0.1])})

    assert ACT(0.01).exits(s).tolist() == [False, False, True, True]
    assert ACT(0.05).exits(s).tolist() == [False, True, True, True]
    with pytest.raises(ValueError, match="eps"):
        ACT(1.0)


def test_ponder_stops_with_probability_lambda_from_a_per_token_draw():
    # given 4000 tokens at loop 1 with lambda = 0.3, then the same tokens again
    n = 4000
    s = signals(t=[1] * n, n_loops=[4] * n, cumulative=[0.0] * n)
    s = LoopSignals(**{**vars(s), "gate": torch.full((n,), 0.3)})

    stops = Ponder().exits(s)

    # then about 30% stop, the same ones each time, and a token's draw is its own
    assert abs(stops.float().mean().item() - 0.3) < 0.03
    assert torch.equal(stops, Ponder().exits(s))
    assert torch.equal(Ponder().exits(s.select(torch.arange(10, 20))), stops[10:20])
    other = LoopSignals(**{**vars(s), "seed": torch.full((n,), 1)})
    assert not torch.equal(Ponder().exits(other), stops)


def test_halting_draws_are_uniform_and_differ_by_loop():
    seed, pos = torch.zeros(10_000, dtype=torch.long), torch.arange(10_000)
    u1 = halting_uniform(seed, pos, torch.ones_like(pos))
    u2 = halting_uniform(seed, pos, torch.full_like(pos, 2))

    assert u1.min() >= 0 and u1.max() < 1 and abs(u1.mean().item() - 0.5) < 0.02
    assert (u1 != u2).float().mean() > 0.99


def test_a_seeds_halting_draws_stay_the_same_so_stored_runs_replay():
    # given draws for fixed (seed, position, loop), a seed past 31 bits and a negative one
    seed = torch.tensor([0, 7, 2**40 + 3, -5])
    position = torch.tensor([0, 1, 100, 3])
    t = torch.tensor([1, 2, 3, 12])

    draws = halting_uniform(seed, position, t)

    # then they are the ones recorded runs were sampled with (multiples of 2**-24)
    expected = torch.tensor([137538, 13535548, 4599632, 12844001]) / float(1 << 24)
    assert torch.equal(draws, expected)


def test_select_keeps_every_signal_of_the_chosen_tokens_in_their_order():
    # given three tokens whose every signal differs
    s = LoopSignals(
        t=torch.tensor([1, 2, 3]),
        n_loops=torch.tensor([4, 5, 6]),
        cumulative=torch.tensor([0.1, 0.2, 0.3]),
        kl=torch.tensor([1.0, 2.0, 3.0]),
        gate=torch.tensor([0.4, 0.5, 0.6]),
        gate_sum=torch.tensor([0.7, 0.8, 0.9]),
        seed=torch.tensor([7, 8, 9]),
        position=torch.tensor([10, 11, 12]),
    )

    picked = s.select(torch.tensor([2, 0]))

    # then each field holds tokens 2 and 0, KL included
    for name, values in vars(s).items():
        assert torch.equal(getattr(picked, name), values[[2, 0]]), name


def test_convergence_without_the_kl_signal_says_so():
    with pytest.raises(ValueError, match="^the convergence rule needs the KL signal$"):
        Convergence(1e-3).exits(signals([1], [4], [0.0]))


def test_ponder_stops_only_when_the_draw_falls_below_lambda():
    # given a token whose draw is exactly representable, and lambda equal to it or just above
    one = signals(t=[2], n_loops=[4], cumulative=[0.0])
    draw = halting_uniform(one.seed, one.position, one.t)
    at = LoopSignals(**{**vars(one), "gate": draw})
    above = LoopSignals(**{**vars(one), "gate": draw + 2**-24})

    # then P(stop) = lambda: a draw equal to lambda does not stop, one below it does
    assert Ponder().exits(at).tolist() == [False]
    assert Ponder().exits(above).tolist() == [True]


def test_act_stops_when_the_gates_sum_exactly_to_one_minus_eps_and_eps_may_be_zero():
    s = signals(t=[1, 2], n_loops=[4, 4], cumulative=[0.0] * 2)
    s = LoopSignals(**{**vars(s), "gate_sum": torch.tensor([0.75, 1.0])})

    assert ACT(0.25).exits(s).tolist() == [True, True]
    assert ACT(0.0).exits(s).tolist() == [False, True]
