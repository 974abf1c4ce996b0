"""Attention over the depth-indexed cache, for partially active sequences.

Two shapes of the problem, each solved so the fused attention kernel does the work:

- **Prefill** (:class:`PrefillTiles`): in loop t only the active positions query, but
  they see every position's current K/V. One boolean mask over all keys would make the
  kernel compute the whole (active × all) rectangle, about twice the causal work. So
  the active queries are cut into tiles by position range [lo, hi); a tile attends
  only to keys [0, hi) with a causal mask, which recovers the causal kernel's skipping
  of the upper triangle. Tiles and masks are built once per loop, shared by all layers,
  and each tile is one kernel call over the whole batch.
- **Decode** (:class:`DecodePlan`): a query's keys live in two tensors (the terminal
  store and the loop-t store, see :mod:`kernels.cache`). Copying them into one tensor
  per layer would cost as much memory traffic as attention itself, so each segment is
  attended in place and the partial results are merged exactly by their log-sum-exp:
  softmax over the union of keys = Σ_s w_s · o_s with w_s ∝ exp(lse_s).

On CPU, ``aten::_scaled_dot_product_flash_attention_for_cpu`` returns the log-sum-exp
and takes GQA heads and an additive mask directly; elsewhere a small explicit version
computes it (decode queries are single tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:  # the cache imports this module
    from kernels.cache import LoopStore

# prefill query tiles: up to TILES position ranges per loop, each at least TILE_MIN wide
TILES = 8
TILE_MIN = 64


@dataclass
class Segment:
    """Keys/values token-major (B, L, n_kv_heads, d) and an additive mask (B, 1, Lq, L)."""

    k: Tensor
    v: Tensor
    mask: Tensor | None = None


def additive_mask(visible: Tensor, dtype: torch.dtype) -> Tensor:
    """bool (…) -> 0 where visible, -inf elsewhere (the fused CPU kernel wants q's dtype)."""
    zeros = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return zeros.masked_fill_(~visible, float("-inf"))


def _use_fused_cpu(q: Tensor) -> bool:
    return q.device.type == "cpu"


def attend_with_lse(q: Tensor, segment: Segment) -> tuple[Tensor, Tensor]:
    """q (B, Lq, nh, d) over one segment -> (o (B, nh, Lq, d), lse (B, nh, Lq)).

    Rows that see no key at all give garbage; callers mark them (see :func:`merge`).
    """
    qh, kh, vh = q.transpose(1, 2), segment.k.transpose(1, 2), segment.v.transpose(1, 2)
    if _use_fused_cpu(q):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qh, kh, vh, attn_mask=segment.mask
        )
    b, nh, lq, d = qh.shape
    nkv = kh.shape[1]
    qg = qh.reshape(b, nkv, nh // nkv, lq, d).float()  # query head h uses kv head h // g
    scores = torch.einsum("bkgqd,bkld->bkgql", qg, kh.float()) * d**-0.5
    if segment.mask is not None:
        scores = scores + segment.mask[:, :, None].float()
    lse = scores.logsumexp(-1)  # (B, nkv, g, Lq)
    probs = (scores - lse[..., None]).exp().nan_to_num(0.0)
    o = torch.einsum("bkgql,bkld->bkgqd", probs, vh.float()).to(q.dtype)
    return o.reshape(b, nh, lq, d), lse.reshape(b, nh, lq)


def merge(parts: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Exact softmax over the union of segments from their (o, lse); an lse of -inf marks
    a row that saw nothing in that segment. -> (B, nh, Lq, d)."""
    lse = torch.stack([lse for _, lse in parts])  # (S, B, nh, Lq)
    weights = torch.softmax(lse.float(), dim=0).to(parts[0][0].dtype)
    return sum(w.unsqueeze(-1) * o for w, (o, _) in zip(weights, parts, strict=True))


def attend_segments(q: Tensor, segments: list[Segment]) -> Tensor:
    """q (B, Lq, nh, d) over the union of the segments' keys (every row must see at least
    one key in every segment) -> (B, Lq, nh, d)."""
    if len(segments) == 1:
        (s,) = segments
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            s.k.transpose(1, 2),
            s.v.transpose(1, 2),
            attn_mask=s.mask,
            enable_gqa=True,
        )
        return o.transpose(1, 2)
    return merge([attend_with_lse(q, s) for s in segments]).transpose(1, 2)


def _compact(mask: Tensor) -> tuple[Tensor, Tensor, int]:
    """Per row, the rank of each True entry of a (B, S) mask among that row's True entries.

    Returns (flat index into B*S of the True entries, their rank, the widest row)."""
    flat = mask.flatten().nonzero().squeeze(1)
    rank = (mask.cumsum(1) - 1).flatten()[flat]
    width = int(mask.sum(1).max()) if len(flat) else 0
    return flat, rank, width


class PrefillTiles:
    """Causal attention of the active queries of one prefill loop (see the module doc).

    Args:
        flat: (N,) the active positions, as indices into B*S, in increasing order.
        batch, length: B and S.
    """

    def __init__(self, flat: Tensor, batch: int, length: int, dtype: torch.dtype) -> None:
        device = flat.device
        cols, rows = flat % length, flat // length
        span = max(TILE_MIN, -(-length // TILES))
        self.batch = batch
        self.tiles = []
        for lo in range(0, length, span):
            hi = min(lo + span, length)
            sel = ((cols >= lo) & (cols < hi)).nonzero().squeeze(1)  # into the N queries
            if not len(sel):
                continue
            in_tile = torch.zeros(batch, length, dtype=torch.bool, device=device)
            in_tile.view(-1)[flat[sel]] = True
            _, rank, width = _compact(in_tile)
            slot = rows[sel] * width + rank
            pos = torch.full((batch * width,), -1, dtype=torch.long, device=device)
            pos[slot] = cols[sel]
            pos = pos.view(batch, width)  # (B, W) position of each query slot, -1 = padding
            visible = torch.arange(hi, device=device)[None, None, :] <= pos[:, :, None]
            visible[..., 0] |= pos < 0  # padding slots look at one key: no all -inf row
            self.tiles.append((sel, slot, width, hi, additive_mask(visible[:, None], dtype)))

    def attend(self, q: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """q (N, nh, d) of the active tokens; keys/values (B, S, nkv, d) -> (N, nh, d)."""
        out = torch.empty_like(q)
        for sel, slot, width, hi, mask in self.tiles:
            qp = q.new_zeros(self.batch * width, *q.shape[1:])
            qp[slot] = q[sel]
            o = attend_segments(
                qp.view(self.batch, width, *q.shape[1:]),
                [Segment(keys[:, :hi], values[:, :hi], mask)],
            )
            out[sel] = o.reshape(self.batch * width, *q.shape[1:])[slot]
        return out


class DecodePlan:
    """One decode step's view of the cache, built once and shared by every layer.

    Row i (sequence ``rows[i]``, its token at position ``pos[i]`` and loop ``loops[i]``)
    sees the terminal entries visible at its loop (``visible`` (R, W), its own slot
    included) and the whole loop store of its loop (``c_lens[i]`` entries, none at the
    last loop). With every sequence of the batch present, the terminal segment is one
    batched call with a per-row mask; the loop-store segment is batched too when all rows
    are at the same loop, else one call per row on a view (rows at different loops read
    different stores). Without every sequence, each row is attended alone on views.

    ``packed``: instead, one attention call for every row, whatever its loop: each row's
    keys are copied into one padded (R, W + L, nkv, d) layout (its W terminal slots, then
    up to L entries of its loop's store, one gather per loop present) under one mask. The
    copy costs memory traffic, the per-row calls cost launches and host work: the runner
    picks per device (:attr:`kernels.runner.StepRunner.packed_attention`).
    """

    def __init__(
        self,
        *,
        rows: list[int],
        batch: int,
        positions: list[int],
        loops: list[int],
        visible: Tensor,
        c_lens: list[int],
        n_loops: int,
        dtype: torch.dtype,
        c_offsets: list[int] | None = None,
    ) -> None:
        """``c_offsets``: where each row's entries start in its loop's store; given, the
        step is ``packed``."""
        self.rows, self.pos, self.loops, self.c_lens = rows, positions, loops, c_lens
        self.n_loops, self.dtype = n_loops, dtype
        self.batched = len(rows) == batch
        self.width = visible.shape[1]
        # always applied (a mask of zeros changes nothing): knowing that a row sees every
        # key would cost a read back from the device
        self.mask = additive_mask(visible, dtype)  # (R, W)
        self.same_loop = len(set(loops)) == 1
        self.packed = c_offsets is not None
        if c_offsets is not None:
            self._pack(c_offsets, visible.device)

    def _pack(self, offsets: list[int], device: torch.device) -> None:
        """The packed layout's tables, shared by every layer: the rows whose terminal slots
        are read, and per loop present its rows and the store slots each reads (padding
        repeats a row's last entry, masked)."""
        r, self.longest = len(self.rows), max(self.c_lens)
        self.terminal_rows = torch.tensor(self.rows, device=device)  # (R,)
        present = [[j < n for j in range(self.longest)] for n in self.c_lens]
        in_store = torch.tensor(present, dtype=torch.bool, device=device).view(r, self.longest)
        mask = torch.cat([self.mask, additive_mask(in_store, self.dtype)], 1)
        self.packed_mask = mask[:, None, None, :]  # (R, 1, 1, W + L)
        self.gathers: list[tuple[int, Tensor, Tensor]] = []  # (loop, rows (R_t,), (R_t, L))
        for t in sorted(set(self.loops)):
            sel = [i for i, u in enumerate(self.loops) if u == t and self.c_lens[i]]
            if sel:
                slots = [
                    [offsets[i] + min(j, self.c_lens[i] - 1) for j in range(self.longest)]
                    for i in sel
                ]
                index = torch.tensor(slots, device=device).view(len(sel), self.longest)
                self.gathers.append((t, torch.tensor(sel, device=device), index))

    def nbytes(self) -> int:
        """The step's tables (and, packed, one layer's gathered keys and values)."""
        n = self.mask.numel() * self.mask.element_size()
        if self.packed:
            n += self.packed_mask.numel() * self.packed_mask.element_size()
        return n

    def _attend_packed(
        self, q: Tensor, terminal: tuple[Tensor, Tensor], stores: dict[int, LoopStore], layer: int
    ) -> Tensor:
        """q (R, 1, nh, d) -> (R, 1, nh, d): one call over the packed layout."""
        out = []
        for tensor, of_store in zip(terminal, ("k", "v"), strict=True):  # (B, S, nkv, d)
            own = tensor[:, : self.width].index_select(0, self.terminal_rows)  # (R, W, nkv, d)
            if not self.longest:
                out.append(own)
                continue
            gathered = own.new_zeros(len(self.rows), self.longest, *own.shape[2:])
            for t, sel, slots in self.gathers:
                gathered[sel] = getattr(stores[t], of_store)[layer][slots]  # (R_t, L, nkv, d)
            out.append(torch.cat([own, gathered], 1))  # (R, W + L, nkv, d)
        keys, values = out
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=self.packed_mask,
            enable_gqa=True,
        )
        return o.transpose(1, 2)

    def attend(
        self, q: Tensor, terminal: tuple[Tensor, Tensor], stores: dict[int, LoopStore], layer: int
    ) -> Tensor:
        """q (R, 1, nh, d); terminal (K, V) (B, S, nkv, d); stores {t: LoopStore} of the
        loops present; -> (R, 1, nh, d)."""
        if self.packed:
            return self._attend_packed(q, terminal, stores, layer)
        if not self.batched:
            rows = [self._attend_row(i, q, terminal, stores, layer) for i in range(len(self.rows))]
            return torch.cat(rows)
        ek, ev = terminal
        mask = self.mask[:, None, None, :]
        parts = [attend_with_lse(q, Segment(ek[:, : self.width], ev[:, : self.width], mask))]
        t = self.loops[0]
        batched = (
            stores[t].batched(layer)
            if self.same_loop and t < self.n_loops and max(self.c_lens)
            else None
        )
        if batched is not None:
            parts.append(self._batched_store(q, batched))
        elif any(self.c_lens):
            parts.append(self._per_row_stores(q, stores, layer, parts[0]))
        if len(parts) == 1:
            return parts[0][0].transpose(1, 2)
        return merge(parts).transpose(1, 2)

    def _batched_store(self, q: Tensor, store: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        ck, cv = store
        longest = max(self.c_lens)
        lens = torch.tensor(self.c_lens, device=q.device)
        mask = None
        if min(self.c_lens) < longest:
            present = torch.arange(longest, device=q.device)[None, :] < lens[:, None]
            present[:, 0] = True  # a row with an empty store: masked out below via lse
            mask = additive_mask(present, self.dtype)[:, None, None]
        o, lse = attend_with_lse(q, Segment(ck[:, :longest], cv[:, :longest], mask))
        return o, lse.masked_fill((lens == 0)[:, None, None], float("-inf"))

    def _per_row_stores(
        self, q: Tensor, stores: dict[int, LoopStore], layer: int, like: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, Tensor]:
        """Each row's own loop store (rows at different loops read different stores)."""
        o_like, lse_like = like
        no_o, no_lse = torch.zeros_like(o_like[:1]), torch.full_like(lse_like[:1], float("-inf"))
        outs, lses = [], []
        for i, (r, t, n) in enumerate(zip(self.rows, self.loops, self.c_lens, strict=True)):
            o, lse = (
                attend_with_lse(q[i : i + 1], Segment(*stores[t].row(layer, r)))
                if n
                else (no_o, no_lse)
            )
            outs.append(o)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    def _attend_row(
        self,
        i: int,
        q: Tensor,
        terminal: tuple[Tensor, Tensor],
        stores: dict[int, LoopStore],
        layer: int,
    ) -> Tensor:
        r, p = self.rows[i], self.pos[i] + 1
        ek, ev = terminal
        mask = self.mask[i : i + 1, None, None, :p]
        segments = [Segment(ek[r : r + 1, :p], ev[r : r + 1, :p], mask)]
        if self.c_lens[i]:
            segments.append(Segment(*stores[self.loops[i]].row(layer, r)))
        return attend_segments(q[i : i + 1], segments)
