"""The depth-indexed KV cache: per position, only the loops that position computed.

Layout, for a batch of B sequences (token-major: one entry is (kv_heads, d)):

- the *terminal* store ``E`` (L, B, S, nkv, d), all layers stacked (``e_k[layer]`` is
  one layer's (B, S, nkv, d) view, and moving entries out of it is one op for all
  layers): one entry per position (slot = position),
  the K/V a later query sees once it is past the position's exit loop.
  ``exit_loop[b, s]`` (shared by all layers) records that loop; the KV policy decides
  what the entry holds and from which loop on it is visible.
- the *loop stores* (:class:`LoopStore`), one for each loop t = 1 … T−1: the loop-t
  K/V of the positions that were still running at loop t and whose terminal entry is
  not the loop-t one. Rows are ragged, so each row owns its own region of one packed
  tensor. Entry order does not matter: keys carry their RoPE phase, so attention over a
  set of keys is order-free.

A query at loop t therefore reads two segments, ``E`` (masked to what is visible at t)
and the loop-t store, which together hold exactly one entry per earlier position.
Memory grows with the sum of exit depths (plus one terminal entry per early exit for
policies whose terminal entry is not a computed loop), never with T × length.

Every byte allocated here is counted (index and length tables included), with the peak.
Loop stores are sized exactly from prefill; when decoding needs room, a store is
re-packed with each row's region grown by 1/16 (at least 16 slots, but never past what
the row can still need: one entry per position, so its entries plus its free cache
slots), the old and the
new tensors both counting while it is copied (only the entries kept: a row being
replaced is not copied).
"""

from __future__ import annotations

import torch
from torch import Tensor

GROWTH_MIN = 16  # a row's loop-store region grows by at least this many slots, or 1/16
TABLE_ENTRY = 8  # bytes per entry of a Python-side index table, counted as int64


class LoopStore:
    """Loop t's K/V (every layer) of the positions that went on past t; rows packed.

    Row b's entries are ``k[layer][offsets[b] : offsets[b] + lens[b]]``, in a region of
    ``caps[b]`` slots. One tensor per layer, so a re-pack holds only one layer twice.
    """

    def __init__(self, cache: DepthKVCache, caps: list[int]) -> None:
        self.cache = cache
        self.lens = [0] * cache.batch
        self.k: list[Tensor] = []  # per layer (N, nkv, d)
        self.v: list[Tensor] = []
        self.caps: list[int]  # set by _repack, which reads neither for an empty store
        self.offsets: list[int]
        cache._account(3 * cache.batch * TABLE_ENTRY)  # offsets, caps, lens
        self._repack(caps)

    def _repack(self, caps: list[int]) -> None:
        cache = self.cache
        offsets = [sum(caps[:b]) for b in range(cache.batch)]
        shape = (sum(caps), *cache.entry_shape)
        source = None
        if self.k and any(self.lens):
            # for each new slot, the old slot it copies: a row's entries, then (slack, never
            # read unmasked) its last entry again, or slot 0 for a row without entries; one
            # gather per layer builds the new tensor
            source = (
                torch.cat(
                    [
                        torch.arange(c).clamp(max=n - 1) + self.offsets[b] if n else torch.zeros(c)
                        for b, (n, c) in enumerate(zip(self.lens, caps, strict=True))
                    ]
                )
                .long()
                .to(cache.device)
            )
        for tensors in (self.k, self.v):
            for layer in range(cache.n_layers):
                if source is None:
                    new = cache._alloc(shape)
                else:
                    new = tensors[layer].index_select(0, source)
                    cache._account(new.numel() * new.element_size())
                if len(tensors) <= layer:
                    tensors.append(new)
                    continue
                cache._free(tensors[layer])
                tensors[layer] = new
        self.caps, self.offsets = caps, offsets

    def reserve(self, needed: list[int]) -> None:
        """Make every row's region hold ``needed[b]`` entries (re-packing if one is short).

        A region grows by 1/16 (at least GROWTH_MIN slots), but never past what the row
        can still need: one entry per position, so at most its entries plus its free
        cache slots (and never past the cache's capacity)."""
        if all(n <= c for n, c in zip(needed, self.caps, strict=True)):
            return
        cache = self.cache
        caps = []
        for b, (n, c) in enumerate(zip(needed, self.caps, strict=True)):
            room = min(cache.capacity, self.lens[b] + cache.capacity - cache.e_len[b])
            caps.append(c if n == 0 else max(c, n, min(room, n + max(GROWTH_MIN, n // 16))))
        self._repack(caps)

    def row(self, layer: int, b: int) -> tuple[Tensor, Tensor]:
        """Row b's entries of one layer: (K, V), each (1, lens[b], nkv, d), views."""
        start, stop = self.offsets[b], self.offsets[b] + self.lens[b]
        return self.k[layer][None, start:stop], self.v[layer][None, start:stop]

    def batched(self, layer: int) -> tuple[Tensor, Tensor] | None:
        """(B, cap, nkv, d) views when every row's region has the same size, else None."""
        cap = self.caps[0]
        if any(c != cap for c in self.caps):
            return None
        b = self.cache.batch
        return self.k[layer].view(b, cap, *self.cache.entry_shape), self.v[layer].view(
            b, cap, *self.cache.entry_shape
        )

    def append(self, rows: list[int], k: Tensor | list[Tensor], v: Tensor | list[Tensor]) -> None:
        """One entry for each row in ``rows``: k[layer], v[layer] are (R, nkv, d) (k, v
        are lists or (L, R, nkv, d) tensors)."""
        needed = list(self.lens)
        for b in rows:
            needed[b] += 1
        self.reserve(needed)
        slots = torch.tensor(
            [self.offsets[b] + self.lens[b] for b in rows], device=self.cache.device
        )
        for layer in range(self.cache.n_layers):
            self.cache._check(k[layer], v[layer], (len(rows),))
            self.k[layer][slots] = k[layer]
            self.v[layer][slots] = v[layer]
        for b in rows:
            self.lens[b] += 1

    def extend(self, b: int, k: Tensor, v: Tensor) -> None:
        """Entries appended to row b, in order: k, v (L, n, nkv, d)."""
        n = k.shape[1]
        self.reserve([c + n if r == b else c for r, c in enumerate(self.lens)])
        start = self.offsets[b] + self.lens[b]
        for layer in range(self.cache.n_layers):
            self.cache._check(k[layer], v[layer], (n,))
            self.k[layer][start : start + n] = k[layer]
            self.v[layer][start : start + n] = v[layer]
        self.lens[b] += n

    def set_row(
        self, b: int, k: Tensor | list[Tensor], v: Tensor | list[Tensor], extra: int = 0
    ) -> None:
        """Replace row b's entries: k[layer], v[layer] are (n, nkv, d). Its old entries are
        dropped first, so a re-pack does not copy them. Its region is made to hold n +
        ``extra`` entries (the entries it may still get: one per token it will decode,
        within the cache's capacity), so decoding them re-packs nothing."""
        n = len(k[0])
        self.lens[b] = 0
        want = max(n, min(self.cache.capacity, n + extra))
        self.reserve([want if r == b else c for r, c in enumerate(self.lens)])
        for layer in range(self.cache.n_layers):
            self.cache._check(k[layer], v[layer], (n,))
            self.k[layer][self.offsets[b] : self.offsets[b] + n] = k[layer]
            self.v[layer][self.offsets[b] : self.offsets[b] + n] = v[layer]
        self.lens[b] = n


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
        shape = (n_layers, batch, capacity, *self.entry_shape)
        self.e_k = self._alloc(shape)  # (L, B, S, nkv, d); e_k[layer] is (B, S, nkv, d)
        self.e_v = self._alloc(shape)
        self.exit_loop = self._alloc((batch, capacity), torch.int8)  # (B, S); 0 = empty
        self.e_len = [0] * batch
        self._account(batch * TABLE_ENTRY)  # e_len
        # loop t's store at index t-1; None until a position goes on past loop t
        self.loops: list[LoopStore | None] = [None] * (n_loops - 1)

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

    # -- writes (the only code that writes this cache's tensors; shapes are checked) ----
    def _check(self, k: Tensor, v: Tensor, lead: tuple[int, ...]) -> None:
        want = (*lead, *self.entry_shape)
        assert k.shape == want and v.shape == want, f"K/V {tuple(k.shape)}, expected {want}"
        assert k.dtype == v.dtype == self.dtype, f"K/V dtype {k.dtype}, expected {self.dtype}"

    def write_prefix(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Every row's slots [0, S) of one layer's terminal store: k, v (B, S, nkv, d)."""
        self._check(k, v, (self.batch, k.shape[1]))
        assert k.shape[1] <= self.capacity, f"{k.shape[1]} positions, capacity {self.capacity}"
        self.e_k[layer][:, : k.shape[1]] = k
        self.e_v[layer][:, : k.shape[1]] = v

    def write_terminal(self, layer: int, rows: Tensor, slots: Tensor, k: Tensor, v: Tensor) -> None:
        """Terminal slots (rows[i], slots[i]) of one layer: rows, slots (N,); k, v (N, nkv, d)."""
        self._check(k, v, (len(rows),))
        assert rows.shape == slots.shape, f"rows {tuple(rows.shape)} vs slots {tuple(slots.shape)}"
        self.e_k[layer][rows, slots] = k
        self.e_v[layer][rows, slots] = v

    def commit_prefill(self, exit_loop: Tensor, lengths: list[int], start: int = 0) -> None:
        """After prefill, or one chunk of it: the compute depth (B, W) of positions
        [start, start + W) and each row's length so far."""
        assert exit_loop.shape[0] == self.batch == len(lengths), "one length per row"
        stop = start + exit_loop.shape[1]
        assert max(lengths) <= stop <= self.capacity, "positions past capacity"
        self.exit_loop[:, start:stop] = exit_loop.to(torch.int8)
        self.e_len = list(lengths)

    def commit_token(self, row: int, loop: int) -> None:
        """Row ``row``'s token at slot e_len[row] is done at ``loop``: the slot is taken."""
        position = self.e_len[row]
        assert position < self.capacity, f"row {row} is full ({self.capacity} slots)"
        assert 1 <= loop <= self.n_loops, f"exit loop {loop} outside 1..{self.n_loops}"
        self.exit_loop[row, position] = loop
        self.e_len[row] = position + 1

    def truncate(self, row: int, length: int, loop_lens: list[int]) -> None:
        """Row ``row`` back to its first ``length`` positions and, in each loop store, its
        first ``loop_lens[t - 1]`` entries (what :meth:`loop_lens` said then): what was
        written after (a speculative draft's K/V) is never read again."""
        assert length <= self.e_len[row], f"row {row} holds {self.e_len[row]} positions"
        self.exit_loop[row, length:] = 0
        self.e_len[row] = length
        for store, n in zip(self.loops, loop_lens, strict=True):
            if store is not None:
                assert n <= store.lens[row], "a truncation only drops entries"
                store.lens[row] = n

    def loop_lens(self, row: int) -> list[int]:
        """Row ``row``'s entries in each loop store (t = 1 … T−1), 0 where there is none."""
        return [store.lens[row] if store is not None else 0 for store in self.loops]

    def keep_loop(self, t: int, kept: Tensor, start: int = 0) -> None:
        """Add loop t's K/V of the ``kept`` (B, W) positions [start, start + W) (read from
        their terminal slots) to the loop-t store; a new store is sized exactly."""
        assert kept.shape[0] == self.batch and kept.dtype == torch.bool, "kept is (B, W) bool"
        flat = kept.flatten().nonzero().squeeze(1)
        if not len(flat):
            return
        w = kept.shape[1]
        counts = kept.sum(1).tolist()
        store = self.loop(t, caps=counts)
        before = list(store.lens)
        store.reserve([n + c for n, c in zip(before, counts, strict=True)])
        rows, rank = flat // w, (kept.cumsum(1) - 1).flatten()[flat]
        cols = flat % w + start
        ends = [o + n for o, n in zip(store.offsets, before, strict=True)]
        dst = torch.tensor(ends, device=self.device)[rows] + rank
        for layer in range(self.n_layers):
            store.k[layer][dst] = self.e_k[layer][rows, cols]
            store.v[layer][dst] = self.e_v[layer][rows, cols]
        store.lens = [n + c for n, c in zip(before, counts, strict=True)]

    # -- loop stores -------------------------------------------------------------------
    def loop(self, t: int, caps: list[int] | None = None) -> LoopStore:
        """Loop t's store (1-based, t < T), created (with ``caps`` slots per row) if absent."""
        store = self.loops[t - 1]
        if store is None:
            store = self.loops[t - 1] = LoopStore(self, caps or [0] * self.batch)
        return store

    def loop_len(self, t: int, b: int) -> int:
        store = self.loops[t - 1] if t < self.n_loops else None
        return store.lens[b] if store is not None else 0

    def load_row(self, row: int, source: DepthKVCache, extra: int = 0, source_row: int = 0) -> None:
        """Replace sequence ``row`` with row ``source_row`` of ``source`` (the cache of a
        prefill of new requests).

        A loop-store region that must grow is sized for ``extra`` more entries (the tokens
        the request will decode), so its decoding does not re-pack the store again. The
        source's transient bytes count toward this cache's peak.
        """
        src = source_row
        n = source.e_len[src]
        if n > self.capacity:
            raise ValueError(f"a {n}-token prompt does not fit a {self.capacity}-slot cache")
        self.peak_bytes = max(self.peak_bytes, self.live_bytes + source.peak_bytes)
        self._check(source.e_k[:, src, :n], source.e_v[:, src, :n], (self.n_layers, n))
        self.e_k[:, row, :n] = source.e_k[:, src, :n]
        self.e_v[:, row, :n] = source.e_v[:, src, :n]
        self.exit_loop[row] = 0
        self.exit_loop[row, :n] = source.exit_loop[src, :n]
        self.e_len[row] = n
        if source.n_loops > self.n_loops:
            raise ValueError(f"a {source.n_loops}-loop request does not fit {self.n_loops} loops")
        for t in range(1, self.n_loops):
            theirs = source.loops[t - 1] if t < source.n_loops else None
            if theirs is None and self.loops[t - 1] is None:
                continue
            if theirs is not None:
                start, stop = theirs.offsets[src], theirs.offsets[src] + theirs.lens[src]
                ks = [k[start:stop] for k in theirs.k]
                vs = [v[start:stop] for v in theirs.v]
            else:
                empty = torch.empty(0, *self.entry_shape, dtype=self.dtype, device=self.device)
                ks = vs = [empty] * self.n_layers
            self.loop(t).set_row(row, ks, vs, extra)

    # -- reporting ---------------------------------------------------------------------
    def entries(self) -> int:
        """Stored (position, loop) entries per layer: Σ terminal + Σ loop-store lengths."""
        return sum(self.e_len) + sum(sum(s.lens) for s in self.loops if s is not None)
