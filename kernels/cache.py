"""The depth-indexed KV cache: per position, only the loops that position computed.

Layout, per layer, for a batch of B sequences (token-major tensors, (B, slots, kv_heads, d)):

- the *terminal* store ``E``: one entry per position (slot = position), the K/V a later
  query sees once it is past the position's exit loop. ``exit_loop[b, s]`` (shared by all
  layers) records that loop; the KV policy decides what the entry holds and from which
  loop on it is visible.
- the *loop stores* ``C[t]`` for t = 1 … T−1: the loop-t K/V of the positions that were
  still running at loop t and whose terminal entry is not the loop-t one. Entry order
  does not matter: keys carry their RoPE phase, so attention over a set of keys is
  order-free. Rows are ragged (``c_len[t][b]`` valid entries).

A query at loop t therefore reads two segments, ``E`` (masked to what is visible at t)
and ``C[t]``, which together hold exactly one entry per earlier position. Memory grows
with the sum of exit depths (plus one terminal entry per early exit for policies whose
terminal entry is not a computed loop), never with T × length.

Every byte allocated here is counted (index and length tables included), with the peak.
A loop store is first sized exactly (from prefill), then grows by 1/16 (at least 16
slots) when decoding needs more; while it grows, the old and the new tensor both count.
"""

from __future__ import annotations

import torch
from torch import Tensor

GROWTH_MIN = 16  # a loop store grows by at least this many slots, or 1/16 of its size


class DepthKVCache:
    def __init__(
        self,
        *,
        n_layers: int,
        n_loops: int,
        batch: int,
        capacity: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.n_layers, self.n_loops, self.batch = n_layers, n_loops, batch
        self.entry_shape = (n_kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.live_bytes = 0
        self.peak_bytes = 0
        self.capacity = capacity
        shape = (batch, capacity, *self.entry_shape)
        self.e_k = [self._alloc(shape) for _ in range(n_layers)]  # (B, S, nkv, d) per layer
        self.e_v = [self._alloc(shape) for _ in range(n_layers)]
        self.exit_loop = self._alloc((batch, capacity), torch.int8)  # (B, S); 0 = empty
        self.e_len = [0] * batch
        # loop stores, index t-1 for loop t; None until a position continues past t
        self.c_k: list[list[Tensor] | None] = [None] * (n_loops - 1)
        self.c_v: list[list[Tensor] | None] = [None] * (n_loops - 1)
        self.c_len = [[0] * batch for _ in range(n_loops - 1)]
        self._account(n_loops * batch * 8)  # the length tables e_len and c_len, as int64

    # -- byte accounting ---------------------------------------------------------------
    def _account(self, nbytes: int) -> None:
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _alloc(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> Tensor:
        tensor = torch.zeros(shape, dtype=dtype or self.dtype, device=self.device)
        self._account(tensor.numel() * tensor.element_size())
        return tensor

    def _free(self, tensor: Tensor) -> None:
        self.live_bytes -= tensor.numel() * tensor.element_size()

    def note_scratch(self, nbytes: int) -> None:
        """Count a per-step table built from the cache (a decode mask) toward the peak."""
        self.peak_bytes = max(self.peak_bytes, self.live_bytes + nbytes)

    # -- loop stores -------------------------------------------------------------------
    def loop_store(self, t: int, layer: int) -> tuple[Tensor, Tensor] | None:
        """(K, V) of loop t (1-based, t < T) for one layer, or None while empty."""
        if self.c_k[t - 1] is None:
            return None
        return self.c_k[t - 1][layer], self.c_v[t - 1][layer]

    def reserve_loop(self, t: int, slots: int) -> None:
        """Make loop t's store hold at least ``slots`` entries per row."""
        i = t - 1
        current = 0 if self.c_k[i] is None else self.c_k[i][0].shape[1]
        if slots <= current:
            return
        new = slots if current == 0 else max(slots, current + max(GROWTH_MIN, current // 16))
        new = min(new, self.capacity)
        shape = (self.batch, new, *self.entry_shape)
        for store in (self.c_k, self.c_v):
            old = store[i]
            grown = []
            for layer in range(self.n_layers):
                tensor = self._alloc(shape)
                if old is not None:
                    tensor[:, :current] = old[layer]
                    self._free(old[layer])
                grown.append(tensor)
            store[i] = grown

    def append_loop(self, t: int, rows: Tensor, k: list[Tensor], v: list[Tensor]) -> None:
        """Append one entry per row in ``rows`` (R,) to loop t: k[layer] (R, nkv, d)."""
        row_list = rows.tolist()
        lens = self.c_len[t - 1]
        self.reserve_loop(t, max(lens[b] for b in row_list) + 1)
        slots = torch.tensor([lens[b] for b in row_list], device=self.device)
        for layer in range(self.n_layers):
            ck, cv = self.loop_store(t, layer)
            ck[rows, slots] = k[layer]
            cv[rows, slots] = v[layer]
        for b in row_list:
            lens[b] += 1

    def load_row(self, row: int, source: DepthKVCache) -> None:
        """Replace sequence ``row`` with row 0 of ``source`` (a new request's prefill cache).

        The source's transient bytes count toward this cache's peak.
        """
        n = source.e_len[0]
        if n > self.capacity:
            raise ValueError(f"a {n}-token prompt does not fit a {self.capacity}-slot cache")
        self.peak_bytes = max(self.peak_bytes, self.live_bytes + source.peak_bytes)
        for mine, theirs in ((self.e_k, source.e_k), (self.e_v, source.e_v)):
            for layer in range(self.n_layers):
                mine[layer][row, :n] = theirs[layer][0, :n]
        self.exit_loop[row] = 0
        self.exit_loop[row, :n] = source.exit_loop[0, :n]
        self.e_len[row] = n
        for t in range(1, self.n_loops):
            length = source.c_len[t - 1][0]
            self.c_len[t - 1][row] = length
            if not length:
                continue
            self.reserve_loop(t, length)
            for layer in range(self.n_layers):
                (ck, cv), (sk, sv) = self.loop_store(t, layer), source.loop_store(t, layer)
                ck[row, :length] = sk[0, :length]
                cv[row, :length] = sv[0, :length]

    # -- reporting ---------------------------------------------------------------------
    def entries(self) -> int:
        """Stored (position, loop) entries per layer: Σ terminal + Σ loop-store lengths."""
        return sum(self.e_len) + sum(sum(lens) for lens in self.c_len)

    def entry_bytes(self) -> int:
        """Bytes of one K plus one V entry across all layers."""
        n_kv, d = self.entry_shape
        return 2 * self.n_layers * n_kv * d * torch.empty((), dtype=self.dtype).element_size()
