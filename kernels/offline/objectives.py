"""Ouro's two training objectives over the loops (seeds 000/001, §3.4 of the paper).

Stage one trains the LM and the gate together on the expected loss under the stopping
distribution, with an entropy bonus that keeps mass on every loop::

    sum_t p_t L_t - beta H(p)

Stage two freezes the LM and trains only the gate, from what the next loop really
bought: the realised gain I_{t+1} = max(0, L_t - L_{t+1}) of *detached* per-token
losses becomes a soft "continue" label sigmoid(k (I_{t+1} - gamma)), and λ_t (the
probability of stopping at t) is fitted to one minus it with binary cross-entropy. λ_t
decides whether loop t+1 is worth running, so its label is loop t+1's gain; λ_T is
never used (the last loop takes the remainder) and gets no label.

All tensors are loop-first, as :class:`kernels.model.LoopOutput` holds them: (T, B, S).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.exits import stopping_distribution


def per_loop_losses(step_logits: Tensor, targets: Tensor) -> Tensor:
    """Next-token cross-entropy of every loop's logits: (T, B, S, V) against targets
    (B, S), or (T, B, S) where each loop has its own -> (T, B, S)."""
    n_loops = step_logits.shape[0]
    flat = F.cross_entropy(
        step_logits.flatten(0, 2).float(),  # (T*B*S, V)
        targets.expand(n_loops, *targets.shape[-2:]).flatten(),  # (T*B*S,)
        reduction="none",
    )
    return flat.view(step_logits.shape[:3])  # (T, B, S)


def ponder_loss(
    losses: Tensor, gate_logits: Tensor, beta: float, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Stage one: mean over tokens of sum_t p_t L_t - beta H(p).

    Args:
        losses: (T, B, S) per-token loss of each loop (with gradient).
        gate_logits: (T, B, S) raw gate outputs; λ = sigmoid of them.
        beta: weight of the entropy bonus.
        mask: (B, S) bool, the positions that count (a task's answer); default all.
    Returns:
        (loss, entropy) scalars; the entropy is detached, for logging.
    """
    p = stopping_distribution(torch.sigmoid(gate_logits).movedim(0, -1))  # (B, S, T)
    expected = (p * losses.movedim(0, -1)).sum(-1)  # (B, S)
    entropy = -(p * p.clamp_min(1e-12).log()).sum(-1)  # (B, S)
    if mask is not None:
        expected, entropy = expected[mask], entropy[mask]  # (M,)
    return (expected - beta * entropy).mean(), entropy.mean().detach()


def context_exit_losses(
    losses: Tensor, mask: Tensor, scale: float, margin: float, lookahead: bool = False
) -> tuple[Tensor, Tensor]:
    """Stage two's per-loop losses when only ``mask`` positions are scored (a task's
    answer) and the other positions (the context) are labelled by what stopping costs.

    A context position's own next token is unpredictable (a random letter), so its own gain
    would stop it at loop 1; but the answer reads its K/V at deeper loops, and under
    best-available KV an exited position's later K/V never exist. So ``losses`` holds K = T
    runs, run k with the context stopping after loop k and the answer at full depth, and a
    context position's "loss" at loop k is the row's summed answer loss of run k: its
    loops are worth what the answer gains from them, with the K/V the engine really shows.
    The row's context stops at the first k whose further loops gain at most ``margin`` (as
    :func:`continue_targets` labels it), and its answer positions keep their own losses
    from that run, the context K/V they will read.

    Args:
        losses: (K, T, B, S) per-loop losses of the K runs.
        mask: (B, S) bool, the scored positions.
    Returns:
        (losses (T, B, S), the context's exit loop per row (B,)).
    """
    row = (losses[:, -1] * mask).sum(-1)  # (K, B): the answer's loss at full depth
    stop = continue_targets(row, scale, margin, lookahead) <= 0.5  # (K-1, B)
    stop = torch.cat([stop, torch.ones_like(stop[:1])])  # the last loop always stops
    exit_loop = stop.long().argmax(0) + 1  # (B,) first stopping loop
    rows = torch.arange(mask.shape[0], device=mask.device)
    own = losses[exit_loop - 1, :, rows].movedim(0, 1)  # (T, B, S): that run's losses
    return torch.where(mask, own, row[:, :, None]), exit_loop


def continue_targets(
    losses: Tensor, scale: float, margin: float, lookahead: bool = False
) -> Tensor:
    """Soft labels for "run loop t+1": sigmoid(scale (I_{t+1} - margin)), (T, ...) ->
    (T-1, ...). The losses are detached here: labels never carry gradient.

    With ``lookahead`` the gain is the best of any later loop, L_t - min_{u>t} L_u: an
    answer that only comes right at loop t+2 (a middle loop that does half the work, as a
    pointer chase's intermediate hop does) gains nothing at t+1, and the next loop's gain
    alone would stop it there."""
    losses = losses.detach()
    later = losses[1:]  # L_{t+1} for t = 1..T-1
    if lookahead:
        later = later.flip(0).cummin(0).values.flip(0)  # min_{u>t} L_u
    gain = (losses[:-1] - later).clamp_min(0)  # I_{t+1} for t = 1..T-1
    return torch.sigmoid(scale * (gain - margin))


def gate_loss(
    gate_logits: Tensor, losses: Tensor, scale: float, margin: float, lookahead: bool = False
) -> Tensor:
    """Stage two: BCE of λ_t = sigmoid(gate_t) against 1 - continue label, t < T."""
    stop = 1.0 - continue_targets(losses, scale, margin, lookahead)  # (T-1, B, S)
    return F.binary_cross_entropy_with_logits(gate_logits[:-1].float(), stop)
