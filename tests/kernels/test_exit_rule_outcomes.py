"""Exit rules and KV policies judged by their outcomes: which loop a token exits at for
given gate values, and which terminal entries a query sees. The tests drive each rule the
way the engine does (loop by loop, on the running cumulative), so a wrong comparison in a
rule shows up here and not only in a reference that holds its own copy of the rule."""

import pytest
import torch

from kernels.exits import step_mass
from kernels.rules import Convergence, Fixed, LoopSignals, QExit, kv_policy

SEED_LAMBDAS = [0.2, 0.5, 1.0]  # the seed's toy: cumulative (0.2, 0.6, 1.0)
DYADIC_LAMBDAS = [0.25, 0.5, 0.5, 1.0]  # cumulative (0.25, 0.625, 0.8125, 1.0), exact in float32


def _signals(
    t: int | torch.Tensor, n_loops: int, cumulative: torch.Tensor, kl: torch.Tensor | None
) -> LoopSignals:
    """The signals the engine hands a rule after loop ``t`` for N tokens (N,)."""
    n = cumulative.shape[0]
    return LoopSignals(
        t=torch.as_tensor(t).expand(n),
        n_loops=torch.full((n,), n_loops),
        cumulative=cumulative,
        kl=kl,
        gate=torch.zeros(n),
        gate_sum=torch.zeros(n),
        seed=torch.zeros(n, dtype=torch.int64),
        position=torch.arange(n),
    )


def _exit_loops(rule, lambdas: list[list[float]], kls: list[list[float]] | None = None) -> list:
    """The 1-based loop each token exits at: the engine's loop, a rule call after each loop.

    ``lambdas`` is (tokens, loops) of gate values; ``kls`` the same shape of KL values for
    rules that read them (NaN at loop 1, as the engine passes it).
    """
    lam = torch.tensor(lambdas)  # (N, T)
    n, n_loops = lam.shape
    remaining, cumulative = torch.ones(n), torch.zeros(n)  # (N,)
    exit_loop = torch.zeros(n, dtype=torch.int64)  # (N,) 0 = not yet exited
    for t in range(1, n_loops + 1):
        p, remaining = step_mass(lam[:, t - 1], remaining, is_last=t == n_loops)
        cumulative = cumulative + p
        kl = torch.tensor(kls)[:, t - 1] if kls is not None else None  # (N,)
        exits = rule.exits(_signals(t, n_loops, cumulative, kl))  # (N,) bool
        exit_loop = torch.where((exit_loop == 0) & exits, t, exit_loop)
    return exit_loop.tolist()


@pytest.mark.parametrize(("q", "loop"), [(0.1, 1), (0.2, 1), (0.5, 2), (0.6, 2), (0.9, 3)])
def test_q_exit_reproduces_the_seed_toy(q, loop) -> None:
    # cumulative (0.2, 0.6, 1.0): q = 0.2 and q = 0.6 are reached exactly, so exit there
    assert _exit_loops(QExit(q), [SEED_LAMBDAS]) == [loop]


@pytest.mark.parametrize(("q", "loop"), [(0.25, 1), (0.625, 2), (0.8125, 3), (0.8126, 4)])
def test_q_exit_stops_where_the_cumulative_equals_q(q, loop) -> None:
    # ≥, not >: a cumulative exactly at q is reached (values exact in float32)
    assert _exit_loops(QExit(q), [DYADIC_LAMBDAS]) == [loop]


def test_q_exit_decides_each_token_on_its_own_cumulative() -> None:
    lambdas = [[0.9, 0.5, 0.5, 1.0], [0.0, 0.0, 0.0, 0.0], DYADIC_LAMBDAS]
    assert _exit_loops(QExit(0.7), lambdas) == [1, 4, 3]


def test_q_one_runs_full_depth_even_when_the_cumulative_reaches_one_early() -> None:
    assert _exit_loops(QExit(1.0), [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]) == [3, 3]
    assert _exit_loops(QExit(0.999), [[1.0, 1.0, 1.0]]) == [1]


def test_q_exit_takes_each_tokens_own_loop_in_decode() -> None:
    # given tokens at different loops of a 3-loop model (decode mixes loops), all at 0.5
    rule, cumulative = QExit(0.6), torch.tensor([0.5, 0.5, 0.5])
    loops = torch.tensor([1, 2, 3])
    # then only the token at the last loop stops; at cumulative 0.6 all of them do
    assert rule.exits(_signals(loops, 3, cumulative, None)).tolist() == [False, False, True]
    assert rule.exits(_signals(loops, 3, cumulative + 0.1, None)).tolist() == [True, True, True]


@pytest.mark.parametrize(("threshold", "loop"), [(0.05, 4), (0.1, 3), (0.2, 2), (1.0, 2)])
def test_convergence_stops_at_the_first_kl_below_the_threshold(threshold, loop) -> None:
    # KL is NaN at loop 1 (nothing to compare) and never below a threshold there; a KL
    # equal to the threshold is not below it
    kls = [[float("nan"), 0.1, 0.05, 0.5]]
    assert _exit_loops(Convergence(threshold), [[0.5] * 4], kls) == [loop]


def test_a_zero_kl_threshold_is_allowed_and_runs_full_depth() -> None:
    # no KL is below zero, not even a KL of exactly zero
    kls = [[float("nan"), 0.0, 0.0, 0.0]]
    assert _exit_loops(Convergence(0.0), [[0.5] * 4], kls) == [4]


def test_fixed_stops_every_token_at_its_loop_capped_by_the_run() -> None:
    lambdas = [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    assert _exit_loops(Fixed(2), lambdas) == [2, 2]
    assert _exit_loops(Fixed(1), lambdas) == [1, 1]
    assert _exit_loops(Fixed(7), lambdas) == [3, 3]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Fixed(0), "fixed loops must be >= 1"),
        (lambda: Convergence(-0.1), "kl_threshold must be >= 0"),
        (lambda: QExit(0.0), "q must lie in"),
        (lambda: QExit(1.01), "q must lie in"),
    ],
)
def test_rules_refuse_settings_that_mean_nothing(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


# exit loops of four earlier positions; a query at loop t of a 4-loop model
EXIT_LOOPS = torch.tensor([1, 2, 3, 4])


@pytest.mark.parametrize(
    ("policy", "t", "visible"),
    [
        # best-available and select: the entry a position left at its exit loop e is its
        # deepest, seen by every query at a loop t ≥ e
        ("best-available", 1, [True, False, False, False]),
        ("best-available", 2, [True, True, False, False]),
        ("best-available", 4, [True, True, True, True]),
        ("select", 3, [True, True, True, False]),
        # recompute-kv: loops ≤ e live in the loop stores, the projection serves t > e,
        # and the last loop sees every terminal entry
        ("recompute-kv", 1, [False, False, False, False]),
        ("recompute-kv", 2, [True, False, False, False]),
        ("recompute-kv", 3, [True, True, False, False]),
        ("recompute-kv", 4, [True, True, True, True]),
    ],
)
def test_terminal_entries_visible_per_kv_policy(policy, t, visible) -> None:
    assert kv_policy(policy).terminal_visible(EXIT_LOOPS, t, 4).tolist() == visible


def test_terminal_visibility_follows_each_querys_own_loop() -> None:
    # given queries at loops 1 and 3 (rows) over the same earlier positions (columns)
    t = torch.tensor([[1], [3]])  # (rows, 1)
    # then
    assert kv_policy("recompute-kv").terminal_visible(EXIT_LOOPS, t, 4).tolist() == [
        [False, False, False, False],
        [True, True, False, False],
    ]


def test_an_unknown_kv_policy_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="best-available, select, recompute-kv"):
        kv_policy("deepest")
