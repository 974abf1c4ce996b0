import pytest
import torch

from kernels.rules import Convergence, Fixed, LoopSignals, QExit


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
