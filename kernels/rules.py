"""Exit rules (when a token stops looping) and KV policies (what later loops see of it).

Both are chosen per request and reported under their own names. A rule takes the loop t
as one int (prefill) or as each token's own loop, a tensor (decode mixes loops).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from kernels.exits import check_q


@dataclass(frozen=True)
class QExit:
    """Ouro's rule: stop at the first loop whose cumulative exit probability reaches q."""

    q: float = 1.0
    name = "q-exit"
    needs_logits = False

    def __post_init__(self) -> None:
        check_q(self.q)

    def exits(self, t: int | Tensor, n_loops: int, cumulative: Tensor, kl: Tensor | None) -> Tensor:
        if self.q >= 1.0:  # full depth, whatever the cumulative rounds to
            return torch.zeros_like(cumulative, dtype=torch.bool) | (t >= n_loops)
        return (cumulative >= self.q) | (t >= n_loops)


@dataclass(frozen=True)
class Convergence:
    """Training-free: stop at the first loop t ≥ 2 where KL(p_{t-1} ‖ p_t) of the next-token
    distributions falls below ``kl_threshold`` (the LM head runs at every loop for this)."""

    kl_threshold: float = 1e-3
    name = "convergence"
    needs_logits = True

    def __post_init__(self) -> None:
        if not self.kl_threshold >= 0:
            raise ValueError(f"kl_threshold must be >= 0, got {self.kl_threshold}")

    def exits(self, t: int | Tensor, n_loops: int, cumulative: Tensor, kl: Tensor | None) -> Tensor:
        if kl is None:
            raise ValueError("the convergence rule needs the KL of each loop (needs_logits)")
        done = kl < self.kl_threshold  # NaN (loop 1: nothing to compare) is never below
        return done | torch.as_tensor(t >= n_loops, device=done.device)


@dataclass(frozen=True)
class Fixed:
    """Every token stops after ``loops`` loops (capped at the run's loop count)."""

    loops: int
    name = "fixed"
    needs_logits = False

    def __post_init__(self) -> None:
        if self.loops < 1:
            raise ValueError(f"fixed loops must be >= 1, got {self.loops}")

    def exits(self, t: int | Tensor, n_loops: int, cumulative: Tensor, kl: Tensor | None) -> Tensor:
        return torch.zeros_like(cumulative, dtype=torch.bool) | (t >= min(self.loops, n_loops))


ExitRule = QExit | Convergence | Fixed


@dataclass(frozen=True)
class KVPolicy:
    """What a query at loop t sees of an earlier position that exited at loop e < t.

    - ``best-available``: the K/V it computed at loop e, same layer (the deepest it has);
    - ``recompute-kv``: its frozen exit state projected through each layer's K/V
      projections (what a deeper loop's layer would have produced from that state);
    - ``select``: no skipping at all, every token computes every loop and the exit rule
      only selects which loop's logits are the output (the reference behaviour).
    """

    name: str
    compute_all: bool = False  # select: exits choose outputs only
    frozen_terminal: bool = False  # recompute-kv: terminal entry is the projected state

    def terminal_visible(self, exit_loop: Tensor, t: Tensor | int, n_loops: int) -> Tensor:
        """Is a terminal entry of a position that exited at ``exit_loop`` visible at loop t?"""
        if self.frozen_terminal:  # loops ≤ e live in the loop stores, the projection after e
            return (exit_loop < t) | (t >= n_loops)
        return exit_loop <= t


POLICIES = {
    p.name: p
    for p in (
        KVPolicy("best-available"),
        KVPolicy("select", compute_all=True),
        KVPolicy("recompute-kv", frozen_terminal=True),
    )
}


def kv_policy(name: str) -> KVPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown KV policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name]
