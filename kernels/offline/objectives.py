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


def context_losses(losses: Tensor, mask: Tensor) -> Tensor:
    """Per-loop losses for stage two's labels when only ``mask`` positions are scored
    (a task's answer): every other position of a row takes the row's summed answer loss.

    A context position's own next token is unpredictable (a random digit), so its own gain
    would label it "stop" at loop 1; but the answer reads its K/V at deeper loops, and
    with best-available KV an exited position's later loops never happen. Its further
    loops are worth what the answer still gains from them. (T, B, S), (B, S) -> (T, B, S).
    """
    answer = (losses * mask).sum(-1, keepdim=True)  # (T, B, 1)
    return torch.where(mask, losses, answer)


def continue_targets(
    losses: Tensor, scale: float, margin: float, lookahead: bool = False
) -> Tensor:
    """Soft labels for "run loop t+1": sigmoid(scale (I_{t+1} - margin)), (T, B, S) ->
    (T-1, B, S). The losses are detached here: labels never carry gradient.

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
