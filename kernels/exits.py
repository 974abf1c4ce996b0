"""Ouro's exit rule: the stopping distribution of the gate and Q-exit.

The gate after loop t gives λ_t, the probability of stopping at t *given* t was reached.
The stopping distribution is p_t = λ_t · ∏_{j<t} (1 − λ_j) for t < T, and the last loop
takes the remainder, p_T = ∏_{j<T} (1 − λ_j): λ_T is computed but never used, and the
p_t sum to one. Q-exit stops at the first loop whose *cumulative* probability reaches q,
the last loop when none does. The expected depth Σ t·p_t is a statistic, never an exit
step. Loops are numbered from 1 here, as in the seeds: (0.2, 0.5, 1.0) gives
p = (0.2, 0.4, 0.4), cumulative (0.2, 0.6, 1.0), q = 0.5 → loop 2, q = 0.9 → loop 3,
expected depth 2.2.

Every function takes a Python sequence of floats or a tensor whose *last* dimension
is the loop dimension (batched over the leading ones); tensors are computed in float32
at least, whatever the model dtype. ``q = 1`` is full depth by definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import torch
from torch import Tensor

Lambdas = Sequence[float] | Tensor


def _check_lambdas(lambdas: Lambdas) -> None:
    if isinstance(lambdas, Tensor):
        if lambdas.ndim == 0 or lambdas.shape[-1] == 0:
            raise ValueError("expected at least one loop (a non-empty last dimension)")
        if bool(((lambdas < 0) | (lambdas > 1) | lambdas.isnan()).any()):
            raise ValueError("conditional exit probabilities must lie in [0, 1]")
        return
    if len(lambdas) == 0:
        raise ValueError("expected at least one conditional exit probability")
    if any(not 0.0 <= value <= 1.0 for value in lambdas):  # NaN fails this too
        raise ValueError("conditional exit probabilities must lie in [0, 1]")


def check_q(q: float) -> float:
    """Validate a Q-exit threshold: q must lie in (0, 1]."""
    if not 0.0 < q <= 1.0:  # NaN fails this too
        raise ValueError(f"q must lie in (0, 1], got {q}")
    return float(q)


@overload
def step_mass(
    lam: Tensor, remaining: Tensor | float, is_last: bool | Tensor
) -> tuple[Tensor, Tensor]: ...
@overload
def step_mass(lam: float, remaining: float, is_last: bool) -> tuple[float, float]: ...
def step_mass(
    lam: Tensor | float, remaining: Tensor | float, is_last: bool | Tensor
) -> tuple[Tensor | float, Tensor | float]:
    """One loop of the stopping distribution, for loop-by-loop use in the engine.

    Returns (p_t, remaining after t). At the last loop p_t is the whole remainder. The
    remainder is carried as a running product of (1 − λ), in the reference's order.
    ``is_last`` may be a per-token bool tensor (tokens at different loops).
    """
    if isinstance(is_last, Tensor):
        return (
            torch.where(is_last, remaining, remaining * lam),
            torch.where(is_last, 0.0, remaining * (1 - lam)),
        )
    if is_last:
        return remaining, remaining * 0
    return remaining * lam, remaining * (1 - lam)


@overload
def stopping_distribution(lambdas: Tensor) -> Tensor: ...
@overload
def stopping_distribution(lambdas: Sequence[float]) -> list[float]: ...
def stopping_distribution(lambdas: Lambdas) -> Tensor | list[float]:
    """λ (..., T) -> p (..., T): p_t = λ_t ∏_{j<t}(1 − λ_j), the last loop the remainder."""
    _check_lambdas(lambdas)
    if isinstance(lambdas, Tensor):
        lam = lambdas.float() if lambdas.dtype != torch.float64 else lambdas
        n = lam.shape[-1]
        remaining = torch.ones_like(lam[..., 0])
        masses = []
        for t in range(n):
            mass, remaining = step_mass(lam[..., t], remaining, is_last=t == n - 1)
            masses.append(mass)
        return torch.stack(masses, dim=-1)
    remaining_f, out = 1.0, []
    for t, value in enumerate(lambdas):
        mass_f, remaining_f = step_mass(float(value), remaining_f, is_last=t == len(lambdas) - 1)
        out.append(mass_f)
    return out


@overload
def cumulative(lambdas: Tensor) -> Tensor: ...
@overload
def cumulative(lambdas: Sequence[float]) -> list[float]: ...
def cumulative(lambdas: Lambdas) -> Tensor | list[float]:
    """λ (..., T) -> running sum of the stopping distribution (..., T); the last is 1."""
    p = stopping_distribution(lambdas)
    if isinstance(p, Tensor):
        return p.cumsum(-1)
    total, out = 0.0, []
    for mass in p:
        total += mass
        out.append(total)
    return out


@overload
def q_exit(lambdas: Tensor, q: float) -> Tensor: ...
@overload
def q_exit(lambdas: Sequence[float], q: float) -> int: ...
def q_exit(lambdas: Lambdas, q: float) -> Tensor | int:
    """The 1-based exit loop: first t with cumulative_t ≥ q, else the last loop.

    Tensor input (..., T) gives an int64 tensor (...). ``q = 1`` always gives T, so full
    depth never depends on how the cumulative rounds.
    """
    check_q(q)
    cum = cumulative(lambdas)
    if isinstance(cum, Tensor):
        n = cum.shape[-1]
        if q >= 1.0:
            return torch.full(cum.shape[:-1], n, dtype=torch.int64, device=cum.device)
        reached = cum >= q
        reached[..., -1] = True
        return reached.int().argmax(-1).to(torch.int64) + 1
    if q < 1.0:
        for t, value in enumerate(cum, start=1):
            if value >= q:
                return t
    return len(cum)


@overload
def expected_depth(lambdas: Tensor) -> Tensor: ...
@overload
def expected_depth(lambdas: Sequence[float]) -> float: ...
def expected_depth(lambdas: Lambdas) -> Tensor | float:
    """Σ_t t·p_t with t from 1: the mean number of loops under the stopping distribution."""
    p = stopping_distribution(lambdas)
    if isinstance(p, Tensor):
        steps = torch.arange(1, p.shape[-1] + 1, dtype=p.dtype, device=p.device)
        return (p * steps).sum(-1)
    return sum(t * mass for t, mass in enumerate(p, start=1))
