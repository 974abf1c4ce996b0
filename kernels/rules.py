"""Exit rules (when a token stops looping) and KV policies (what later loops see of it).

Both are chosen per request and reported under their own names. A rule sees one
:class:`LoopSignals`: per-token tensors of what the loop just computed said (its loop,
the token's loop cap, the stopping distribution so far, the KL to the previous loop, the
gate), so prefill (every token at one loop) and decode (rows of a batch at their own
loops, with their own caps) call it the same way. ``seed`` and ``position`` let a rule
derive a reproducible random draw per token without a generator of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from kernels.exits import check_q


@dataclass(frozen=True)
class LoopSignals:
    """What loop t said about N tokens, each field (N,): the input of every exit rule."""

    t: Tensor  # int64, the loop just computed (1-based)
    n_loops: Tensor  # int64, the token's loop cap T (the last loop it may run)
    cumulative: Tensor  # float32, sum_{j<=t} p_j of the stopping distribution
    kl: Tensor | None  # float32, KL(p_{t-1} ‖ p_t) (NaN at loop 1); None if no rule asked
    gate: Tensor  # float32, lambda_t of this loop
    gate_sum: Tensor  # float32, sum_{j<=t} lambda_j
    seed: Tensor  # int64, the request's seed
    position: Tensor  # int64, the token's position in its sequence

    @property
    def last(self) -> Tensor:
        """bool (N,): the token has run its last allowed loop."""
        return self.t >= self.n_loops

    def select(self, index: Tensor) -> LoopSignals:
        """The signals of the tokens ``index`` (M,) only."""
        return LoopSignals(
            t=self.t[index],
            n_loops=self.n_loops[index],
            cumulative=self.cumulative[index],
            kl=None if self.kl is None else self.kl[index],
            gate=self.gate[index],
            gate_sum=self.gate_sum[index],
            seed=self.seed[index],
            position=self.position[index],
        )


@dataclass(frozen=True)
class QExit:
    """Ouro's rule: stop at the first loop whose cumulative exit probability reaches q."""

    q: float = 1.0
    name = "q-exit"
    needs_logits = False

    def __post_init__(self) -> None:
        check_q(self.q)

    def exits(self, signals: LoopSignals) -> Tensor:
        if self.q >= 1.0:  # full depth, whatever the cumulative rounds to
            return signals.last
        return (signals.cumulative >= self.q) | signals.last


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

    def exits(self, signals: LoopSignals) -> Tensor:
        if signals.kl is None:
            raise ValueError("the convergence rule needs the KL signal")
        done = signals.kl < self.kl_threshold  # NaN (loop 1: nothing to compare) is never below
        return done | signals.last


@dataclass(frozen=True)
class Fixed:
    """Every token stops after ``loops`` loops (capped at the run's loop count)."""

    loops: int
    name = "fixed"
    needs_logits = False

    def __post_init__(self) -> None:
        if self.loops < 1:
            raise ValueError(f"fixed loops must be >= 1, got {self.loops}")

    def exits(self, signals: LoopSignals) -> Tensor:
        return (signals.t >= self.loops) | signals.last


MASK31 = (1 << 31) - 1


def halting_uniform(seed: Tensor, position: Tensor, t: Tensor) -> Tensor:
    """A uniform draw in [0, 1) per (seed, position, loop), (N,) int64 each -> (N,) float32.

    A counter-based hash rather than a generator: the draw for one token at one loop does
    not depend on which other tokens share the batch or in which order loops run, so a run
    replays exactly however it is batched. Every product stays below 2**62 (no overflow).
    """
    h = ((seed & MASK31) * 0x9E3779B1 + position * 0x85EBCA77 + t * 0xC2B2AE3D) & MASK31
    for _ in range(3):
        h = ((h ^ (h >> 15)) * 0x2C1B3C6D) & MASK31
    return (h & 0xFFFFFF).float() / float(1 << 24)


@dataclass(frozen=True)
class Ponder:
    """PonderNet's sampled halting: after loop t, stop with probability lambda_t, the
    token's draw seeded by (request seed, position, loop) so a run replays exactly."""

    name = "ponder"
    needs_logits = False

    def exits(self, signals: LoopSignals) -> Tensor:
        draw = halting_uniform(signals.seed, signals.position, signals.t)  # (N,)
        return (draw < signals.gate) | signals.last


@dataclass(frozen=True)
class ACT:
    """ACT's accumulated halting: stop at the first loop where sum_{j<=t} lambda_j >= 1 - eps
    (Graves 2016), or at the cap."""

    eps: float = 0.01
    name = "act"
    needs_logits = False

    def __post_init__(self) -> None:
        if not 0 <= self.eps < 1:
            raise ValueError(f"act eps must lie in [0, 1), got {self.eps}")

    def exits(self, signals: LoopSignals) -> Tensor:
        return (signals.gate_sum >= 1 - self.eps) | signals.last


ExitRule = QExit | Convergence | Fixed | Ponder | ACT


@dataclass(frozen=True)
class KVPolicy:
    """What a query at loop t sees of an earlier position that exited at loop e < t.

    - ``best-available``: the K/V it computed at loop e, same layer (the deepest it has);
    - ``recompute-kv``: its frozen exit state projected through each layer's K/V
      projections (what a deeper loop's layer would have produced from that state);
    - ``select``: no skipping at all, every token computes every loop and the exit rule
      only selects which loop's logits are the output (the reference behaviour);
    - ``exit-kv``: one K/V plane per position and layer, from its exit loop, read by every
      loop of every later position (a position still running sees itself at its own
      loop). Its plane exists only once it has exited, so a prompt is prefilled one
      position per chunk: what a later position sees never depends on how the prompt was
      cut. With every position at T this is Ouro's "last-step-only" KV reuse;
    - ``first-loop-kv``: one plane per position and layer, from loop 1, read by every loop
      (its own position included: K/V is written at loop 1 only). Ouro's
      "first-step-only".

    The last two keep no loop stores (:mod:`kernels.cache`): peak KV grows with the
    number of positions, not with the sum of their exit depths.
    """

    name: str
    compute_all: bool = False  # select: exits choose outputs only
    frozen_terminal: bool = False  # recompute-kv: terminal entry is the projected state
    loop_stores: bool = True  # False: the terminal plane is all a position leaves
    first_loop_only: bool = False  # first-loop-kv: K/V is written at loop 1 only
    sequential: bool = False  # exit-kv: a prompt is prefilled one position per chunk

    def terminal_visible(self, exit_loop: Tensor, t: Tensor | int, n_loops: Tensor | int) -> Tensor:
        """Is a terminal entry of a position that exited at ``exit_loop`` visible at loop t?"""
        if not self.loop_stores:  # its one plane serves every loop
            return exit_loop >= 0
        if self.frozen_terminal:  # loops ≤ e live in the loop stores, the projection after e
            return (exit_loop < t) | (t >= n_loops)
        return exit_loop <= t

    def writes_at(self, t: int) -> bool:
        """Does a token write its loop-t K/V to its terminal slot (and attend to it)?"""
        return t == 1 or not self.first_loop_only


POLICIES = {
    p.name: p
    for p in (
        KVPolicy("best-available"),
        KVPolicy("select", compute_all=True),
        KVPolicy("recompute-kv", frozen_terminal=True),
        KVPolicy("exit-kv", loop_stores=False, sequential=True),
        KVPolicy("first-loop-kv", loop_stores=False, first_loop_only=True),
    )
}


def kv_policy(name: str) -> KVPolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown KV policy {name!r}; known: {', '.join(POLICIES)}")
    return POLICIES[name]
