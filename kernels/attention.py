"""Attention over keys split into segments, each read in place from the KV cache.

The engine's keys for a query at loop t live in more than one tensor (a terminal store
and the loop-t store, see :mod:`kernels.cache`). Copying them into one tensor per layer
would cost as much memory traffic as the attention itself, so each segment is attended
separately by the fused kernel and the partial results are merged exactly by their
log-sum-exp: softmax over the union of keys = Σ_s w_s · o_s with w_s ∝ exp(lse_s).

On CPU, ``aten::_scaled_dot_product_flash_attention_for_cpu`` returns the log-sum-exp
(and takes GQA heads and an additive mask directly). Elsewhere segments are
concatenated and attended once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

_flash_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


@dataclass
class Segment:
    """Keys/values token-major (B, L, n_kv_heads, d), an additive mask (B, 1, Lq, L) or None,
    and which query rows see no key at all in this segment (B, 1, Lq) or None."""

    k: Tensor
    v: Tensor
    mask: Tensor | None = None
    blind: Tensor | None = None


def additive_mask(visible: Tensor, dtype: torch.dtype) -> Tensor:
    """bool (…) -> 0 where visible, -inf elsewhere (the fused CPU kernel wants q's dtype)."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(
        ~visible, float("-inf")
    )


def attend_segments(q: Tensor, segments: list[Segment], *, merge: bool | None = None) -> Tensor:
    """q (B, Lq, n_heads, d) over the union of the segments' keys -> (B, Lq, n_heads, d).

    Args:
        merge: log-sum-exp merge (default on CPU) or concatenate (default elsewhere).
    """
    if merge is None:
        merge = q.device.type == "cpu"
    qh = q.transpose(1, 2)  # (B, nh, Lq, d)
    if len(segments) == 1 and segments[0].blind is None:
        (s,) = segments
        o = F.scaled_dot_product_attention(
            qh, s.k.transpose(1, 2), s.v.transpose(1, 2), attn_mask=s.mask, enable_gqa=True
        )
        return o.transpose(1, 2)
    if not merge:
        return _attend_concatenated(qh, segments).transpose(1, 2)
    outs, lses = [], []
    for s in segments:
        o, lse = _flash_cpu(qh, s.k.transpose(1, 2), s.v.transpose(1, 2), attn_mask=s.mask)
        if s.blind is not None:  # the kernel reports lse 0 for a row with no key
            lse = lse.masked_fill(s.blind, float("-inf"))
        outs.append(o)  # (B, nh, Lq, d)
        lses.append(lse)  # (B, nh, Lq)
    lse = torch.stack(lses)  # (S, B, nh, Lq)
    weights = torch.softmax(lse.float(), dim=0).to(q.dtype)  # exact merge weights
    o = sum(w.unsqueeze(-1) * o for w, o in zip(weights, outs, strict=True))
    return o.transpose(1, 2)


def _attend_concatenated(qh: Tensor, segments: list[Segment]) -> Tensor:
    b, _, lq, _ = qh.shape
    k = torch.cat([s.k for s in segments], dim=1).transpose(1, 2)  # (B, nkv, ΣL, d)
    v = torch.cat([s.v for s in segments], dim=1).transpose(1, 2)
    masks = [
        s.mask.expand(b, 1, lq, s.k.shape[1])
        if s.mask is not None
        else qh.new_zeros(b, 1, lq, s.k.shape[1])
        for s in segments
    ]
    return F.scaled_dot_product_attention(qh, k, v, attn_mask=torch.cat(masks, -1), enable_gqa=True)
