"""The depth-skipping engine: prefill and decode that really skip exited tokens' loops.

Unlike the reference, which runs every loop for every token and then selects, a token
that has exited is not computed again: in loop t only the still-active tokens go through
the shared layers (gathered into a compact batch, scattered back). An exited token keeps
its exit-loop state, and its logits are the LM head of that state. What later loops'
queries see of it is the KV policy's choice (:mod:`kernels.rules`); the depth-indexed
cache (:mod:`kernels.cache`) keeps, per position, only the loops it computed.

Prefill runs all prompt positions loop by loop. Decode is *depth-pipelined*: each step
runs one loop for every sequence that still has work, each sequence at its own loop
(the layers are shared by all loops, so one batch can mix depths). A sequence whose
token exits samples its next token and starts it at loop 1 in the next step, instead
of idling until the deepest sequence of the batch is done.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.attention import Segment, additive_mask, attend_segments
from kernels.cache import DepthKVCache
from kernels.config import LoopConfig
from kernels.exits import step_mass
from kernels.model import LoopedLM, padded_causal_attend
from kernels.rules import ExitRule, KVPolicy, QExit, kv_policy
from kernels.sampling import Sampler


@dataclass
class Work:
    """Executed work next to what full depth would have executed for the same tokens."""

    token_loops_executed: int = 0
    token_loops_full: int = 0
    token_layers_executed: int = 0
    head_tokens: int = 0  # LM-head applications (exit logits, convergence, logit lens)
    flops_executed: float = 0.0
    flops_full: float = 0.0

    @property
    def executed_fraction(self) -> float:
        return self.token_loops_executed / max(self.token_loops_full, 1)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class FlopModel:
    """Multiply-adds × 2 of the pieces the engine runs (projections, attention, heads)."""

    def __init__(self, config: LoopConfig) -> None:
        h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
        q_dim, kv_dim = config.num_attention_heads * config.head_dim, config.kv_dim
        self.layers = config.num_hidden_layers
        self.linear = 2 * (h * q_dim + 2 * h * kv_dim + q_dim * h + 3 * h * i)  # per token-layer
        self.per_key = 4 * q_dim  # q·k and p·v for one key, per layer
        self.kv_projection = 2 * 2 * h * kv_dim  # k and v of one state, per layer
        self.gate = 2 * h
        self.head = 2 * h * v

    def loops(self, n_tokens: int, keys: float) -> float:
        """FLOPs of ``n_tokens`` token-loops whose queries see ``keys`` keys in total."""
        return self.layers * (self.linear * n_tokens + self.per_key * keys) + self.gate * n_tokens


@dataclass
class Trace:
    """Per token and computed loop: the gate, the stopping distribution, KL, a logit lens.

    Tensors are (T, N) or (T, N, k) over N token slots; NaN / -1 where not computed.
    """

    gate_lambda: Tensor
    exit_p: Tensor
    cumulative: Tensor
    kl: Tensor
    top_ids: Tensor
    top_probs: Tensor

    @classmethod
    def empty(cls, n_loops: int, n_tokens: int, top_k: int, device: torch.device) -> Trace:
        nan = torch.full((n_loops, n_tokens), float("nan"), device=device)
        return cls(
            gate_lambda=nan.clone(),
            exit_p=nan.clone(),
            cumulative=nan.clone(),
            kl=nan.clone(),
            top_ids=torch.full((n_loops, n_tokens, top_k), -1, dtype=torch.long, device=device),
            top_probs=torch.zeros(n_loops, n_tokens, top_k, device=device),
        )

    def reset(self, slot: int) -> None:
        for tensor in (self.gate_lambda, self.exit_p, self.cumulative, self.kl):
            tensor[:, slot] = float("nan")
        self.top_ids[:, slot] = -1
        self.top_probs[:, slot] = 0.0


@dataclass
class TokenRecord:
    """One position's outcome: its token, exit loop and what each computed loop said."""

    row: int
    position: int
    token_id: int
    phase: str  # "prompt" | "generated"
    exit_loop: int  # 1-based loop whose state is this position's output
    loops_computed: int
    gate_lambda: list[float]
    exit_p: list[float]
    cumulative: list[float]
    kl: list[float | None]
    top: list[list[tuple[int, float]]]  # per computed loop: (token id, prob) of the lens


@dataclass
class PrefillResult:
    ids: Tensor  # (B, S) right-aligned token ids (pads 0)
    lengths: list[int]
    logits: Tensor  # (B, S, V) each position's output logits (its exit loop); pads 0
    exit_loop: Tensor  # (B, S) reported exit loop, 0 for pads
    loops_computed: Tensor  # (B, S)
    cache: DepthKVCache | None
    trace: Trace | None
    work: Work
    state: _TokenState = field(repr=False)


@dataclass
class _TokenState:
    """Per token slot: the running stopping distribution and what has been reported."""

    remaining: Tensor  # (N,) float32
    cumulative: Tensor  # (N,) float32
    reported: Tensor  # (N,) int64 reported exit loop, 0 until then
    out_logits: Tensor  # (N, V) logits at the reported exit loop
    prev_logp: Tensor | None  # (N, V) previous loop's log-probs (convergence only)

    @classmethod
    def create(cls, n: int, vocab: int, dtype: torch.dtype, device: torch.device, kl: bool):
        return cls(
            remaining=torch.ones(n, device=device),
            cumulative=torch.zeros(n, device=device),
            reported=torch.zeros(n, dtype=torch.long, device=device),
            out_logits=torch.zeros(n, vocab, dtype=dtype, device=device),
            prev_logp=torch.zeros(n, vocab, device=device) if kl else None,
        )

    def reset(self, slot: int) -> None:
        self.remaining[slot], self.cumulative[slot], self.reported[slot] = 1.0, 0.0, 0


def _ragged(mask: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """Compact the True entries of a (B, S) mask row by row.

    Returns (flat index into B*S, row, slot in that row's compacted list, widest row).
    """
    b, s = mask.shape
    flat = mask.flatten().nonzero().squeeze(1)  # (N,)
    rows = flat // s
    rank = (mask.cumsum(1) - 1).flatten()[flat]
    width = int(mask.sum(1).max()) if flat.numel() else 0
    return flat, rows, rank, width


class Engine:
    """Runs a :class:`LoopedLM` with per-token exits and real skipping.

    Args:
        model: the looped LM (eval mode; its dtype and device are used).
        rule: the exit rule (default Q-exit with q = 1, i.e. full depth).
        policy: KV policy name: ``best-available`` (default), ``select``, ``recompute-kv``.
        loops: loops T at inference (default the checkpoint's ``total_ut_steps``).
        top_k: width of the per-loop logit lens recorded in traces (0: no lens, no trace
            unless ``trace=True``).
    """

    def __init__(
        self,
        model: LoopedLM,
        rule: ExitRule | None = None,
        policy: str | KVPolicy = "best-available",
        *,
        loops: int | None = None,
        top_k: int = 0,
        trace: bool | None = None,
    ) -> None:
        self.model = model
        self.body = model.model
        self.config = model.config
        self.rule = rule or QExit(1.0)
        self.policy = kv_policy(policy) if isinstance(policy, str) else policy
        self.n_loops = loops or self.config.total_ut_steps
        self.top_k = top_k
        self.tracing = bool(top_k) if trace is None else trace
        self.flops = FlopModel(self.config)
        self.dtype = model.lm_head.weight.dtype
        self.device = model.lm_head.weight.device

    # -- shared by prefill and decode --------------------------------------------------
    def _finish_loop(
        self, t: int, slots: Tensor, h: Tensor, state: _TokenState, trace: Trace | None, work: Work
    ) -> Tensor:
        """After loop t of the tokens in ``slots`` (N,) with normed states h (N, H):
        gate, stopping mass, exit decision, output logits. Returns "stops computing" (N,)."""
        last = t >= self.n_loops
        lam = torch.sigmoid(self.body.gate(h).float())  # (N,)
        p, remaining = step_mass(lam, state.remaining[slots], is_last=last)
        cumulative = state.cumulative[slots] + p
        state.remaining[slots], state.cumulative[slots] = remaining, cumulative
        logits = logp = kl = None
        if self.rule.needs_logits or self.tracing:
            logits = self.model.lm_head(h)  # (N, V)
            logp = F.log_softmax(logits.float(), dim=-1)
            work.head_tokens += len(slots)
            work.flops_executed += self.flops.head * len(slots)
        if self.rule.needs_logits:
            if t >= 2:
                prev = state.prev_logp[slots]
                kl = (prev.exp() * (prev - logp)).sum(-1)  # KL(p_{t-1} ‖ p_t)
            state.prev_logp[slots] = logp
        exits = self.rule.exits(t, self.n_loops, cumulative, kl)  # (N,)
        if trace is not None:
            trace.gate_lambda[t - 1, slots] = lam
            trace.exit_p[t - 1, slots] = p
            trace.cumulative[t - 1, slots] = cumulative
            if kl is not None:
                trace.kl[t - 1, slots] = kl
            if self.top_k:
                top = logp.topk(self.top_k, dim=-1)
                trace.top_ids[t - 1, slots] = top.indices
                trace.top_probs[t - 1, slots] = top.values.exp()
        report = exits & (state.reported[slots] == 0)
        if bool(report.any()):
            chosen = report.nonzero().squeeze(1)
            if logits is None:
                out = self.model.lm_head(h[chosen])
                work.head_tokens += len(chosen)
                work.flops_executed += self.flops.head * len(chosen)
            else:
                out = logits[chosen]
            state.out_logits[slots[chosen]] = out
            state.reported[slots[chosen]] = t
        if self.policy.compute_all:
            return torch.full_like(exits, last)
        return exits

    def _frozen_kv(self, h: Tensor, cos: Tensor, sin: Tensor) -> list[tuple[Tensor, Tensor]]:
        """recompute-kv: each layer's K/V of frozen states h (M, H) -> [(k, v)] per layer."""
        return [
            layer.self_attn.kv(layer.input_layernorm(h), cos, sin) for layer in self.body.layers
        ]

    # -- prefill -----------------------------------------------------------------------
    @torch.no_grad()
    def prefill(
        self,
        rows: list[list[int]] | Tensor,
        attention_mask: Tensor | None = None,
        *,
        reserve: int = 0,
        keep_cache: bool = True,
    ) -> PrefillResult:
        """Run every prompt position through its loops.

        Args:
            rows: token-id lists, or a (B, S) id tensor with ``attention_mask`` marking real
                tokens (padding on either side; it is moved to the right internally).
            reserve: extra cache slots per row for tokens decoded afterwards.
            keep_cache: build the depth-indexed cache (needed to decode afterwards).
        """
        ids, lengths = _right_aligned(rows, attention_mask, self.device)
        b, s = ids.shape
        cfg, body, n_loops = self.config, self.body, self.n_loops
        work = Work()
        real = (
            torch.arange(s, device=self.device)[None, :]
            < torch.tensor(lengths, device=self.device)[:, None]
        )
        n_real = int(real.sum())
        positions = torch.arange(s, device=self.device)
        cos_s, sin_s = body.rotary_emb(positions, self.dtype)  # (S, d)
        cache = DepthKVCache(
            n_layers=cfg.num_hidden_layers,
            n_loops=n_loops,
            batch=b,
            capacity=s + reserve,
            n_kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            dtype=self.dtype,
            device=self.device,
        )
        cap = cache.capacity
        state = _TokenState.create(
            b * s, cfg.vocab_size, self.dtype, self.device, self.rule.needs_logits
        )
        trace = Trace.empty(n_loops, b * s, self.top_k, self.device) if self.tracing else None
        loops_computed = torch.zeros(b * s, dtype=torch.long, device=self.device)
        keys_per_token = (positions + 1).expand(b, s).flatten().float()  # causal keys seen
        work.token_loops_full = n_real * n_loops
        work.flops_full = (
            self.flops.loops(n_real, float(keys_per_token[real.flatten()].sum())) * n_loops
        )
        work.flops_full += self.flops.head * n_real

        x = body.embed_tokens(ids).flatten(0, 1)  # (B*S, H)
        active = real.clone()  # (B, S)
        for t in range(1, n_loops + 1):
            flat, q_rows, q_rank, width = _ragged(active)
            if not len(flat):
                break
            cols = flat % s
            kv_index = q_rows * cap + cols  # into a (B*cap) flattened store
            if len(flat) == b * s:  # every position active: the fused causal kernel as is
                attend = self._prefill_dense_attend(cache, b, s)
                x_a, cos, sin = x.view(b, s, -1), cos_s, sin_s
            else:
                attend = self._prefill_sparse_attend(
                    cache, b, s, kv_index, q_rows * width + q_rank, cols, width
                )
                x_a, cos, sin = x[flat], cos_s[cols], sin_s[cols]
            for layer_index, layer in enumerate(body.layers):
                x_a = layer(x_a, cos, sin, attend(layer_index))
            h = body.norm(x_a).reshape(len(flat), -1)  # (N, H)
            n = len(flat)
            work.token_loops_executed += n
            work.token_layers_executed += n * len(body.layers)
            work.flops_executed += self.flops.loops(n, float(keys_per_token[flat].sum()))
            loops_computed[flat] += 1
            stop = self._finish_loop(t, flat, h, state, trace, work)
            x[flat] = h
            active.view(-1)[flat[stop]] = False
            if keep_cache and t < n_loops:
                # loop t's K/V that stays needed: positions going on (and, for recompute-kv,
                # also those stopping now, whose terminal entry becomes the projection)
                kept = active if not self.policy.frozen_terminal else _mask_of(flat, b, s)
                self._keep_loop(cache, t, kept, cap)
            if self.policy.frozen_terminal and t < n_loops and bool(stop.any()):
                frozen = stop.nonzero().squeeze(1)
                index = kv_index[frozen]
                for layer_index, (k, v) in enumerate(
                    self._frozen_kv(h[frozen], cos_s[cols[frozen]], sin_s[cols[frozen]])
                ):
                    cache.e_k[layer_index].view(b * cap, *cache.entry_shape)[index] = k
                    cache.e_v[layer_index].view(b * cap, *cache.entry_shape)[index] = v
                work.flops_executed += self.flops.kv_projection * len(frozen) * len(body.layers)

        compute_exit = loops_computed.view(b, s)
        cache.exit_loop[:, :s] = compute_exit.to(torch.int8)
        cache.e_len = list(lengths)
        logits = state.out_logits.view(b, s, -1) * real[..., None]
        return PrefillResult(
            ids=ids,
            lengths=lengths,
            logits=logits,
            exit_loop=state.reported.view(b, s),
            loops_computed=compute_exit,
            cache=cache if keep_cache else None,
            trace=trace,
            work=work,
            state=state,
        )

    def _prefill_dense_attend(self, cache: DepthKVCache, b: int, s: int):
        causal = padded_causal_attend(None)

        def for_layer(layer_index: int):
            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, S, heads, d)
                cache.e_k[layer_index][:, :s] = k
                cache.e_v[layer_index][:, :s] = v
                return causal(q, k, v)

            return attend

        return for_layer

    def _prefill_sparse_attend(
        self,
        cache: DepthKVCache,
        b: int,
        s: int,
        kv_index: Tensor,
        q_slot: Tensor,
        q_pos: Tensor,
        width: int,
    ):
        """Active queries, compacted per row to (B, width), attend to all positions' current
        K/V: causal by position, built once per loop and shared by every layer."""
        pos = torch.full((b * width,), -1, dtype=torch.long, device=self.device)
        pos[q_slot] = q_pos
        pos = pos.view(b, width)  # (B, W) position of each query slot, -1 = padding
        keys = torch.arange(s, device=self.device)
        visible = keys[None, None, :] <= pos[:, :, None]  # (B, W, S)
        visible[..., 0] |= pos < 0  # padding slots look at one key: no all -inf row
        mask = additive_mask(visible[:, None], self.dtype)  # (B, 1, W, S)
        entry = cache.entry_shape

        def for_layer(layer_index: int):
            ek, ev = cache.e_k[layer_index], cache.e_v[layer_index]

            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (N, heads, d)
                ek.view(-1, *entry)[kv_index] = k
                ev.view(-1, *entry)[kv_index] = v
                qp = q.new_zeros(b * width, *q.shape[1:])
                qp[q_slot] = q
                o = attend_segments(
                    qp.view(b, width, *q.shape[1:]), [Segment(ek[:, :s], ev[:, :s], mask)]
                )
                return o.reshape(b * width, *q.shape[1:])[q_slot]

            return attend

        return for_layer

    def _keep_loop(self, cache: DepthKVCache, t: int, kept: Tensor, cap: int) -> None:
        """Copy loop t's K/V of the ``kept`` (B, S) positions into the loop-t store."""
        flat, rows, rank, width = _ragged(kept)
        if not len(flat):
            return
        s = kept.shape[1]
        cache.reserve_loop(t, width)
        src = rows * cap + flat % s
        for layer_index in range(cache.n_layers):
            ck, cv = cache.loop_store(t, layer_index)
            dst = rows * ck.shape[1] + rank
            ck.view(-1, *cache.entry_shape)[dst] = cache.e_k[layer_index].view(
                -1, *cache.entry_shape
            )[src]
            cv.view(-1, *cache.entry_shape)[dst] = cache.e_v[layer_index].view(
                -1, *cache.entry_shape
            )[src]
        cache.c_len[t - 1] = kept.sum(1).tolist()

    # -- decode ------------------------------------------------------------------------
    @torch.no_grad()
    def decode(
        self,
        prefill: PrefillResult,
        *,
        max_new_tokens: int,
        sampler: Sampler | None = None,
        eos_token_id: int | None = None,
        work: Work | None = None,
    ) -> Iterator[TokenRecord]:
        """Generate up to ``max_new_tokens`` per row after ``prefill`` (built with
        ``reserve >= max_new_tokens``), yielding each token once it has run its loops.

        Each row stops after its ``max_new_tokens``-th token or after ``eos_token_id``;
        the last sampled token is run too, so its exit loop is known. Executed work is
        added to ``work`` as it happens.
        """
        # The invariant of this loop, for every step and every row b still running:
        #
        # * Row b's current token (at position e_len[b]) is at loop t[b]; it is the only
        #   token of row b computed in this step, and only it: earlier positions have all
        #   exited and are never computed again.
        # * Every earlier position j holds exactly the K/V it computed, per layer: its
        #   terminal entry E[b, j] (exit_loop[b, j] = its compute depth e_j) and, for each
        #   loop u < e_j, a loop-store entry C[u]. Under best-available the terminal entry
        #   is its loop-e_j K/V; under recompute-kv it is its frozen exit state projected by
        #   each layer, and C[e_j] also keeps its loop-e_j K/V; under select e_j = T.
        # * At loop t the token attends to C[t] (positions that went deeper than t: their
        #   loop-t K/V), to the terminal entries visible at t (best-available: e_j <= t,
        #   i.e. each position at loop min(t, e_j)), and to its own loop-t K/V, written to
        #   its terminal slot E[b, e_len[b]] before the layer attends.
        # * When the token goes on to loop t+1, its loop-t K/V moves to C[t]; when it stops,
        #   its slot is committed (exit_loop = t) and the next token starts at loop 1.
        cache = prefill.cache
        if cache is None:
            raise ValueError("prefill was run with keep_cache=False; nothing to decode from")
        if max_new_tokens <= 0:
            return
        if cache.capacity < max(prefill.lengths) + max_new_tokens:
            raise ValueError("prefill reserve is smaller than max_new_tokens")
        sampler = sampler or Sampler()
        cfg, body, n_loops, policy = self.config, self.body, self.n_loops, self.policy
        b = len(prefill.lengths)
        work = work if work is not None else Work()
        state = _TokenState.create(
            b, cfg.vocab_size, self.dtype, self.device, self.rule.needs_logits
        )
        trace = Trace.empty(n_loops, b, self.top_k, self.device) if self.tracing else None
        last = torch.tensor([n - 1 for n in prefill.lengths], device=self.device)
        first_logits = prefill.logits[torch.arange(b, device=self.device), last]  # (B, V)
        tokens = [sampler(first_logits[row], row) for row in range(b)]
        generated = [1] * b
        loop = [1] * b
        computed = [0] * b
        x = body.embed_tokens(torch.tensor(tokens, device=self.device))  # (B, H)
        live = list(range(b))
        for row in live:
            self._start_token(work, cache.e_len[row])

        while live:
            rows = torch.tensor(live, device=self.device)
            pos = torch.tensor([cache.e_len[r] for r in live], device=self.device)
            t_rows = torch.tensor([loop[r] for r in live], device=self.device)
            lockstep = len(live) == b and len(set(loop[r] for r in live)) == 1
            segments = self._decode_segments(cache, live, pos, t_rows, lockstep)
            cos, sin = body.rotary_emb(pos, self.dtype)  # (R, d)
            h = x[rows]
            for layer_index, layer in enumerate(body.layers):
                h = layer(
                    h,
                    cos,
                    sin,
                    self._decode_attend(cache, layer_index, rows, pos, segments, lockstep),
                )
            h = body.norm(h)  # (R, H)
            n = len(live)
            work.token_loops_executed += n
            work.token_layers_executed += n * len(body.layers)
            work.flops_executed += self.flops.loops(n, float((pos + 1).sum()))
            stop = self._finish_loop_rows(rows, h, t_rows, state, trace, work)
            x[rows] = h

            going_on = [r for r, s in zip(live, stop.tolist(), strict=True) if not s]
            stopping = [i for i, s in enumerate(stop.tolist()) if s]
            for t in sorted({loop[r] for r in going_on}):
                group = [r for r in going_on if loop[r] == t]
                self._move_to_loop_store(cache, t, group)
            if policy.frozen_terminal:
                early = [i for i in stopping if loop[live[i]] < n_loops]
                for t in sorted({loop[live[i]] for i in early}):
                    group = [i for i in early if loop[live[i]] == t]
                    self._move_to_loop_store(cache, t, [live[i] for i in group])
                    self._write_frozen(
                        cache, [live[i] for i in group], h[group], cos[group], sin[group], work
                    )
            for r in going_on:
                loop[r] += 1
                computed[r] += 1
            finished = []
            for i in stopping:
                r = live[i]
                computed[r] += 1
                slot = cache.e_len[r]
                cache.exit_loop[r, slot] = loop[r]
                cache.e_len[r] += 1
                yield self._record(r, slot, tokens[r], "generated", state, trace, r, computed[r])
                done = generated[r] >= max_new_tokens or tokens[r] == eos_token_id
                if done:
                    finished.append(r)
                    continue
                tokens[r] = sampler(state.out_logits[r], r)
                generated[r] += 1
                loop[r], computed[r] = 1, 0
                state.reset(r)
                if trace is not None:
                    trace.reset(r)
                x[r] = body.embed_tokens.weight[tokens[r]]
                self._start_token(work, cache.e_len[r])
            live = [r for r in live if r not in finished]

    def _start_token(self, work: Work, position: int) -> None:
        work.token_loops_full += self.n_loops
        work.flops_full += self.flops.loops(1, position + 1) * self.n_loops + self.flops.head

    def _finish_loop_rows(self, rows, h, t_rows, state, trace, work) -> Tensor:
        """``_finish_loop`` for rows at different loops: one call per loop present."""
        stop = torch.zeros(len(rows), dtype=torch.bool, device=self.device)
        for t in sorted(set(t_rows.tolist())):
            sel = (t_rows == t).nonzero().squeeze(1)
            stop[sel] = self._finish_loop(t, rows[sel], h[sel], state, trace, work)
        return stop

    def _decode_segments(self, cache, live, pos, t_rows, lockstep):
        """Per step (shared by every layer): which terminal entries each row sees, and the
        loop-store lengths. Returns what ``_decode_attend`` needs to build views."""
        width = int(pos.max()) + 1
        slots = torch.arange(width, device=self.device)
        exit_loop = cache.exit_loop[torch.tensor(live, device=self.device), :width].long()
        visible = self.policy.terminal_visible(exit_loop, t_rows[:, None], self.n_loops)
        visible &= slots[None, :] < pos[:, None]
        visible |= slots[None, :] == pos[:, None]  # its own K/V at this loop
        mask = cache.scratch(additive_mask(visible, self.dtype))  # (R, W)
        all_visible = visible.all(1).tolist()
        c_lens = [
            cache.c_len[loop - 1][r] if loop < self.n_loops else 0
            for r, loop in zip(live, t_rows.tolist(), strict=True)
        ]
        return {
            "width": width,
            "mask": mask,
            "all_visible": all_visible,
            "c_lens": c_lens,
            "t": t_rows.tolist(),
        }

    def _decode_attend(self, cache, layer_index, rows, pos, seg, lockstep):
        ek, ev = cache.e_k[layer_index], cache.e_v[layer_index]
        n_loops = self.n_loops

        def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (R, heads, d)
            ek[rows, pos] = k  # own loop-t K/V into its terminal slot
            ev[rows, pos] = v
            q = q[:, None]  # (R, 1, nh, d)
            if lockstep:
                return self._attend_lockstep(cache, layer_index, q, seg)[:, 0]
            outs = []
            for i, r in enumerate(rows.tolist()):
                p = int(pos[i]) + 1
                mask = None if seg["all_visible"][i] else seg["mask"][i : i + 1, None, None, :p]
                segments = [Segment(ek[r : r + 1, :p], ev[r : r + 1, :p], mask)]
                t, c_len = seg["t"][i], seg["c_lens"][i]
                if t < n_loops and c_len:
                    ck, cv = cache.loop_store(t, layer_index)
                    segments.append(Segment(ck[r : r + 1, :c_len], cv[r : r + 1, :c_len]))
                outs.append(attend_segments(q[i : i + 1], segments))
            return torch.cat(outs)[:, 0]

        return attend

    def _attend_lockstep(self, cache, layer_index, q, seg) -> Tensor:
        """All rows at the same loop: one batched call per segment."""
        width, t = seg["width"], seg["t"][0]
        ek, ev = cache.e_k[layer_index], cache.e_v[layer_index]
        mask = None if all(seg["all_visible"]) else seg["mask"][:, None, None, :]
        segments = [Segment(ek[:, :width], ev[:, :width], mask)]
        c_lens = seg["c_lens"]
        longest = max(c_lens)
        if t < self.n_loops and longest:
            ck, cv = cache.loop_store(t, layer_index)
            lens = torch.tensor(c_lens, device=self.device)
            present = torch.arange(longest, device=self.device)[None, :] < lens[:, None]  # (B, Lc)
            c_mask = (
                None
                if all(c == longest for c in c_lens)
                else additive_mask(present, self.dtype)[:, None, None]
            )
            blind = (lens == 0)[:, None, None] if min(c_lens) == 0 else None
            segments.append(Segment(ck[:, :longest], cv[:, :longest], c_mask, blind))
        return attend_segments(q, segments)

    def _move_to_loop_store(self, cache: DepthKVCache, t: int, rows: list[int]) -> None:
        """Rows' current loop-t K/V (in their terminal slots) -> the loop-t store."""
        index = torch.tensor(rows, device=self.device)
        slots = torch.tensor([cache.e_len[r] for r in rows], device=self.device)
        cache.append_loop(
            t,
            index,
            [cache.e_k[layer][index, slots] for layer in range(cache.n_layers)],
            [cache.e_v[layer][index, slots] for layer in range(cache.n_layers)],
        )

    def _write_frozen(self, cache, rows, h, cos, sin, work) -> None:
        index = torch.tensor(rows, device=self.device)
        slots = torch.tensor([cache.e_len[r] for r in rows], device=self.device)
        for layer_index, (k, v) in enumerate(self._frozen_kv(h, cos, sin)):
            cache.e_k[layer_index][index, slots] = k
            cache.e_v[layer_index][index, slots] = v
        work.flops_executed += self.flops.kv_projection * len(rows) * cache.n_layers

    def _record(self, row, position, token_id, phase, state, trace, slot, computed) -> TokenRecord:
        n = computed
        if trace is None:
            lam = p = cum = []
            kl: list[float | None] = []
            top: list[list[tuple[int, float]]] = []
        else:
            lam = trace.gate_lambda[:n, slot].tolist()
            p = trace.exit_p[:n, slot].tolist()
            cum = trace.cumulative[:n, slot].tolist()
            kl = [None if v != v else v for v in trace.kl[:n, slot].tolist()]
            top = (
                [
                    list(zip(ids, probs, strict=True))
                    for ids, probs in zip(
                        trace.top_ids[:n, slot].tolist(),
                        trace.top_probs[:n, slot].tolist(),
                        strict=True,
                    )
                ]
                if self.top_k
                else [[] for _ in range(n)]
            )
        return TokenRecord(
            row=row,
            position=position,
            token_id=int(token_id),
            phase=phase,
            exit_loop=int(state.reported[slot]),
            loops_computed=n,
            gate_lambda=lam,
            exit_p=p,
            cumulative=cum,
            kl=kl,
            top=top,
        )

    def prompt_records(self, prefill: PrefillResult) -> Iterator[TokenRecord]:
        """One record per prompt position of ``prefill``, in order, row by row."""
        s = prefill.ids.shape[1]
        for row, n in enumerate(prefill.lengths):
            for position in range(n):
                slot = row * s + position
                yield self._record(
                    row,
                    position,
                    prefill.ids[row, position],
                    "prompt",
                    prefill.state,
                    prefill.trace,
                    slot,
                    int(prefill.loops_computed[row, position]),
                )


def _mask_of(flat: Tensor, b: int, s: int) -> Tensor:
    mask = torch.zeros(b * s, dtype=torch.bool, device=flat.device)
    mask[flat] = True
    return mask.view(b, s)


def _right_aligned(
    rows: list[list[int]] | Tensor, attention_mask: Tensor | None, device: torch.device
) -> tuple[Tensor, list[int]]:
    """Token rows (lists, or ids + mask with padding anywhere) -> (B, S) ids with each row's
    real tokens first, and the row lengths."""
    if isinstance(rows, Tensor):
        mask = attention_mask if attention_mask is not None else torch.ones_like(rows)
        rows = [r[m.bool()].tolist() for r, m in zip(rows, mask, strict=True)]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("every row needs at least one token")
    lengths = [len(r) for r in rows]
    ids = torch.zeros(len(rows), max(lengths), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return ids.to(device), lengths
