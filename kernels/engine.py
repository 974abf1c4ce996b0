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

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.attention import DecodePlan, PrefillTiles
from kernels.cache import DepthKVCache
from kernels.exits import step_mass
from kernels.model import Attend, LoopedLM, padded_causal_attend
from kernels.rules import ExitRule, KVPolicy, LoopSignals, QExit, kv_policy
from kernels.sampling import Sampler
from kernels.work import FlopModel, Work


@dataclass
class Trace:
    """Per token slot and computed loop: gate, stopping distribution, KL, a logit lens.

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

    def record(self, slot: int, loops: int, top_k: int) -> dict:
        """Python lists of the first ``loops`` loops of one slot (NaN KL -> None)."""
        top = [[] for _ in range(loops)]
        if top_k:
            ids, probs = self.top_ids[:loops, slot].tolist(), self.top_probs[:loops, slot].tolist()
            top = [list(zip(i, p, strict=True)) for i, p in zip(ids, probs, strict=True)]
        return {
            "gate_lambda": self.gate_lambda[:loops, slot].tolist(),
            "exit_p": self.exit_p[:loops, slot].tolist(),
            "cumulative": self.cumulative[:loops, slot].tolist(),
            "kl": [None if v != v else v for v in self.kl[:loops, slot].tolist()],
            "top": top,
        }


@dataclass
class TokenRecord:
    """One position's outcome: its token, exit loop and what each computed loop said."""

    row: int
    position: int
    token_id: int
    phase: str  # "prompt" | "generated"
    exit_loop: int  # 1-based loop whose state is this position's output
    loops_computed: int
    gate_lambda: list[float] = field(default_factory=list)
    exit_p: list[float] = field(default_factory=list)
    cumulative: list[float] = field(default_factory=list)
    kl: list[float | None] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)  # lens per loop


@dataclass
class _TokenState:
    """Per token slot: the running stopping distribution and what has been reported."""

    remaining: Tensor  # (N,) float32
    cumulative: Tensor  # (N,) float32
    gate_sum: Tensor  # (N,) float32 sum of the gates so far
    seed: Tensor  # (N,) int64 each slot's request seed (a rule's random draws)
    reported: Tensor  # (N,) int64 reported exit loop, 0 until then
    out_logits: Tensor  # (N, V) logits at the reported exit loop
    prev_logp: Tensor | None  # (N, V) previous loop's log-probs (convergence only)

    @classmethod
    def create(
        cls, n: int, vocab: int, dtype: torch.dtype, device: torch.device, kl: bool, seed: int = 0
    ) -> _TokenState:
        return cls(
            remaining=torch.ones(n, device=device),
            cumulative=torch.zeros(n, device=device),
            gate_sum=torch.zeros(n, device=device),
            seed=torch.full((n,), seed, dtype=torch.long, device=device),
            reported=torch.zeros(n, dtype=torch.long, device=device),
            out_logits=torch.zeros(n, vocab, dtype=dtype, device=device),
            prev_logp=torch.zeros(n, vocab, device=device) if kl else None,
        )

    def reset(self, slot: int) -> None:
        self.remaining[slot], self.cumulative[slot], self.reported[slot] = 1.0, 0.0, 0
        self.gate_sum[slot] = 0.0


@dataclass
class PrefillResult:
    ids: Tensor  # (B, S) right-aligned token ids (pads 0)
    lengths: list[int]
    logits: Tensor  # (B, S, V) each position's output logits (its exit loop); pads 0
    exit_loop: Tensor  # (B, S) reported exit loop, 0 for pads
    loops_computed: Tensor  # (B, S)
    cache: DepthKVCache | None
    work: Work
    trace: Trace | None = field(default=None, repr=False)
    state: _TokenState | None = field(default=None, repr=False)


class Engine:
    """Runs a :class:`LoopedLM` with per-token exits and real skipping.

    Args:
        model: the looped LM (eval mode; its dtype and device are used).
        rule: the exit rule (default Q-exit with q = 1, i.e. full depth).
        policy: KV policy name: ``best-available`` (default), ``select``, ``recompute-kv``.
        loops: loops T at inference (default the checkpoint's ``total_ut_steps``).
        top_k: width of the per-loop logit lens recorded in traces.
        trace: record gate values per loop (default: when ``top_k`` > 0).
        seed: the request's seed, which exit rules see (for reproducible random draws).
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
        seed: int = 0,
    ) -> None:
        self.model, self.body, self.config = model, model.model, model.config
        self.rule = rule or QExit(1.0)
        self.policy = kv_policy(policy) if isinstance(policy, str) else policy
        self.n_loops = loops or self.config.total_ut_steps
        self.top_k = top_k
        self.seed = seed
        self.tracing = bool(top_k) if trace is None else trace
        self.flops = FlopModel(self.config)
        # The full-depth baseline does what this run shows: with a trace, a logit lens at
        # every loop; else one LM-head call per token, at its last loop.
        self.full_heads = self.n_loops if self.tracing else 1
        self.dtype = model.lm_head.weight.dtype
        self.device = model.lm_head.weight.device
        self.queued_prefill_work = Work()  # prefills of prompts served from a decode queue
        self.queued_prefill_s = self.queued_prefill_cpu_s = 0.0

    def _new_cache(self, batch: int, capacity: int) -> DepthKVCache:
        cfg = self.config
        return DepthKVCache(
            n_layers=cfg.num_hidden_layers,
            n_loops=self.n_loops,
            batch=batch,
            capacity=capacity,
            n_kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            dtype=self.dtype,
            device=self.device,
        )

    def _run_layers(self, x: Tensor, cos: Tensor, sin: Tensor, attend: Callable[[int], Attend]):
        for index, layer in enumerate(self.body.layers):
            x = layer(x, cos, sin, attend(index))
        return self.body.norm(x)  # the loop's normed output state

    def _count(self, work: Work, n: int, keys: float) -> None:
        work.token_loops_executed += n
        work.token_layers_executed += n * len(self.body.layers)
        work.flops_executed += self.flops.loops(n, keys)

    def _head(self, h: Tensor, work: Work) -> Tensor:
        work.head_tokens += len(h)
        work.flops_executed += self.flops.head * len(h)
        return self.model.lm_head(h)

    def _finish_loop(
        self,
        t: int | Tensor,
        slots: Tensor,
        position: Tensor,
        h: Tensor,
        state: _TokenState,
        trace: Trace | None,
        work: Work,
    ) -> Tensor:
        """After loop t of the tokens in ``slots`` (N,) with normed states h (N, H): gate,
        stopping mass, exit decision, output logits (one LM-head call for all of them).
        ``position`` (N,) is each token's position. ``t`` is one loop or, in decode, each
        token's own loop (N,). Returns "stops computing" (N,)."""
        last = t >= self.n_loops
        lam = torch.sigmoid(self.body.gate(h).float())  # (N,)
        p, remaining = step_mass(lam, state.remaining[slots], is_last=last)
        cumulative = state.cumulative[slots] + p
        gate_sum = state.gate_sum[slots] + lam
        state.remaining[slots], state.cumulative[slots] = remaining, cumulative
        state.gate_sum[slots] = gate_sum
        logits = logp = kl = None
        if self.rule.needs_logits or self.tracing:
            logits = self._head(h, work)  # (N, V)
            logp = F.log_softmax(logits.float(), dim=-1)
        if self.rule.needs_logits:
            prev = state.prev_logp[slots]
            kl = (prev.exp() * (prev - logp)).sum(-1)  # KL(p_{t-1} ‖ p_t)
            kl = torch.where(torch.as_tensor(t, device=kl.device) >= 2, kl, float("nan"))
            state.prev_logp[slots] = logp
        loop = torch.as_tensor(t, device=lam.device).expand(len(slots))  # (N,)
        signals = LoopSignals(
            t=loop,
            n_loops=torch.full_like(loop, self.n_loops),
            cumulative=cumulative,
            kl=kl,
            gate=lam,
            gate_sum=gate_sum,
            seed=state.seed[slots],
            position=position,
        )
        exits = self.rule.exits(signals)  # (N,)
        if trace is not None:
            trace.gate_lambda[t - 1, slots] = lam
            trace.exit_p[t - 1, slots] = p
            trace.cumulative[t - 1, slots] = cumulative
            if kl is not None:
                trace.kl[t - 1, slots] = kl  # NaN at loop 1
            if self.top_k:
                top = logp.topk(self.top_k, dim=-1)
                trace.top_ids[t - 1, slots] = top.indices
                trace.top_probs[t - 1, slots] = top.values.exp()
        report = exits & (state.reported[slots] == 0)
        if bool(report.any()):
            chosen = report.nonzero().squeeze(1)
            out = logits[chosen] if logits is not None else self._head(h[chosen], work)
            state.out_logits[slots[chosen]] = out
            state.reported[slots[chosen]] = t if isinstance(t, int) else t[chosen]
        if self.policy.compute_all:
            return torch.zeros_like(exits) | last
        return exits

    def _frozen_kv(self, h: Tensor, cos: Tensor, sin: Tensor, work: Work) -> list:
        """recompute-kv: each layer's K/V of frozen states h (M, H) -> [(k, v)] per layer."""
        work.flops_executed += self.flops.kv_projection * len(h) * len(self.body.layers)
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
                tokens (padding on either side; it is moved to the right internally, where
                causal attention never lets a real token see it).
            reserve: extra cache slots per row for tokens decoded afterwards.
            keep_cache: keep every loop's K/V that decoding needs afterwards.
        """
        ids, lengths = _right_aligned(rows, attention_mask, self.device)
        b, s = ids.shape
        work = Work()
        real = torch.arange(s, device=self.device)[None, :] < torch.tensor(lengths)[:, None].to(
            self.device
        )
        cos_s, sin_s = self.body.rotary_emb(torch.arange(s, device=self.device), self.dtype)
        cache = self._new_cache(b, s + reserve)
        state = _TokenState.create(
            b * s,
            self.config.vocab_size,
            self.dtype,
            self.device,
            self.rule.needs_logits,
            self.seed,
        )
        trace = Trace.empty(self.n_loops, b * s, self.top_k, self.device) if self.tracing else None
        loops_computed = torch.zeros(b * s, dtype=torch.long, device=self.device)
        keys = (torch.arange(s, device=self.device) + 1).repeat(b).float()  # causal keys seen
        n_real = sum(lengths)
        work.token_loops_full = n_real * self.n_loops
        work.flops_full = self.n_loops * self.flops.loops(n_real, float(keys[real.flatten()].sum()))
        work.flops_full += self.flops.head * self.full_heads * n_real

        x = self.body.embed_tokens(ids).flatten(0, 1)  # (B*S, H)
        active = real.clone()  # (B, S)
        for t in range(1, self.n_loops + 1):
            flat = active.flatten().nonzero().squeeze(1)  # (N,) active tokens, into B*S
            if not len(flat):
                break
            cols = flat % s
            kv_index = flat // s * cache.capacity + cols  # into a (B*capacity) store
            if len(flat) == b * s:  # every position active: the fused causal kernel as is
                h = self._run_layers(
                    x.view(b, s, -1), cos_s, sin_s, self._dense_attend(cache, s)
                ).flatten(0, 1)
            else:
                tiles = PrefillTiles(flat, b, s, self.dtype)
                h = self._run_layers(
                    x[flat], cos_s[cols], sin_s[cols], self._tiled_attend(cache, tiles, kv_index)
                )
            self._count(work, len(flat), float(keys[flat].sum()))
            loops_computed[flat] += 1
            stop = self._finish_loop(t, flat, cols, h, state, trace, work)
            x[flat] = h
            active.view(-1)[flat[stop]] = False
            if keep_cache and t < self.n_loops:
                # loop t's K/V that stays needed: positions going on (and, for recompute-kv,
                # those stopping now too, whose terminal entry becomes the projection)
                kept = active.flatten().clone()
                if self.policy.frozen_terminal:
                    kept[flat] = True
                self._keep_loop(cache, t, kept.view(b, s))
            if self.policy.frozen_terminal and t < self.n_loops and bool(stop.any()):
                frozen = stop.nonzero().squeeze(1)
                c = cols[frozen]
                for index, (k, v) in enumerate(
                    self._frozen_kv(h[frozen], cos_s[c], sin_s[c], work)
                ):
                    cache.e_k[index].view(-1, *cache.entry_shape)[kv_index[frozen]] = k
                    cache.e_v[index].view(-1, *cache.entry_shape)[kv_index[frozen]] = v

        depth = loops_computed.view(b, s)
        cache.exit_loop[:, :s] = depth.to(torch.int8)
        cache.e_len = list(lengths)
        return PrefillResult(
            ids=ids,
            lengths=lengths,
            logits=state.out_logits.view(b, s, -1) * real[..., None],
            exit_loop=state.reported.view(b, s),
            loops_computed=depth,
            cache=cache if keep_cache else None,
            work=work,
            trace=trace,
            state=state,
        )

    def _dense_attend(self, cache: DepthKVCache, s: int) -> Callable[[int], Attend]:
        causal = padded_causal_attend(None)

        def for_layer(index: int) -> Attend:
            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, S, heads, d)
                cache.e_k[index][:, :s] = k
                cache.e_v[index][:, :s] = v
                return causal(q, k, v)

            return attend

        return for_layer

    def _tiled_attend(
        self, cache: DepthKVCache, tiles: PrefillTiles, kv_index: Tensor
    ) -> Callable[[int], Attend]:
        entry = cache.entry_shape

        def for_layer(index: int) -> Attend:
            ek, ev = cache.e_k[index], cache.e_v[index]

            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (N, heads, d)
                ek.view(-1, *entry)[kv_index] = k  # active positions' loop-t K/V
                ev.view(-1, *entry)[kv_index] = v
                return tiles.attend(q, ek, ev)

            return attend

        return for_layer

    def _keep_loop(self, cache: DepthKVCache, t: int, kept: Tensor) -> None:
        """Copy loop t's K/V of the ``kept`` (B, S) positions into a new loop-t store."""
        flat = kept.flatten().nonzero().squeeze(1)
        if not len(flat):
            return
        s, entry = kept.shape[1], cache.entry_shape
        counts = kept.sum(1).tolist()
        store = cache.loop(t, caps=counts)
        rows, rank = flat // s, (kept.cumsum(1) - 1).flatten()[flat]
        src = rows * cache.capacity + flat % s
        dst = torch.tensor(store.offsets, device=self.device)[rows] + rank
        for index in range(cache.n_layers):
            store.k[index][dst] = cache.e_k[index].view(-1, *entry)[src]
            store.v[index][dst] = cache.e_v[index].view(-1, *entry)[src]
        store.lens = counts

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
        queue: Iterator[list[int]] | None = None,
    ) -> Iterator[TokenRecord]:
        """Generate up to ``max_new_tokens`` per row after ``prefill`` (built with
        ``reserve >= max_new_tokens``), yielding each token once it has run its loops.

        Each row stops after its ``max_new_tokens``-th token or after ``eos_token_id``;
        the last sampled token is run too, so its exit loop is known. Executed work is
        added to ``work`` as it happens.

        With a ``queue`` of further prompts the batch is served continuously: a finished
        row takes the next prompt (prefilled alone, then loaded into that row's cache), so
        the batch stays full and a request's cheap tokens free room for the others'.
        Records then name requests: ``row`` is the prefill's row for the first B requests,
        B, B+1, ... for the queued ones in order (their prompt positions are not yielded).
        """
        cache = prefill.cache
        if cache is None:
            raise ValueError("prefill was run with keep_cache=False; nothing to decode from")
        if max_new_tokens <= 0:
            return
        if cache.capacity < max(prefill.lengths) + max_new_tokens:
            raise ValueError("prefill reserve is smaller than max_new_tokens")
        sampler = sampler or Sampler()
        work = work if work is not None else Work()
        b, n_loops, body = len(prefill.lengths), self.n_loops, self.body
        state = _TokenState.create(
            b,
            self.config.vocab_size,
            self.dtype,
            self.device,
            self.rule.needs_logits,
            self.seed,
        )
        trace = Trace.empty(n_loops, b, self.top_k, self.device) if self.tracing else None
        last = torch.tensor([n - 1 for n in prefill.lengths], device=self.device)
        first = prefill.logits[torch.arange(b, device=self.device), last]  # (B, V)
        tokens = [sampler(first[row], row) for row in range(b)]
        generated, loop, computed = [1] * b, [1] * b, [0] * b
        request = list(range(b))  # the request each row is serving
        queued, next_request = iter(queue or ()), b
        x = body.embed_tokens(torch.tensor(tokens, device=self.device))  # (B, H)
        live = list(range(b))
        for row in live:
            self._start_token(work, cache.e_len[row])

        # The invariant of this loop, at every step, for every row r still running:
        #
        # * Row r's current token, at position e_len[r], is at loop loop[r]. It is the only
        #   token of row r computed in this step: every earlier position has exited and is
        #   never computed again.
        # * Every earlier position j holds exactly the K/V it computed, per layer: one
        #   terminal entry E[r, j] (exit_loop[r, j] = e_j, its compute depth) and, for each
        #   loop u < e_j, an entry in the loop-u store C[u]. Under best-available the
        #   terminal entry is its loop-e_j K/V; under recompute-kv it is its frozen exit
        #   state projected by each layer, and C[e_j] also keeps its loop-e_j K/V (e_j < T);
        #   under select every position computes every loop (e_j = T).
        # * At loop t the token attends to all of C[t] (the positions that went deeper
        #   than t: their loop-t K/V), to the terminal entries visible at t (best-available:
        #   e_j <= t, so each position is seen at loop min(t, e_j)), and to its own loop-t
        #   K/V, written to its terminal slot E[r, e_len[r]] before the layer attends.
        # * When the token goes on to loop t+1 its loop-t K/V moves to C[t]; when it stops,
        #   its slot is committed (exit_loop = t, e_len += 1) and the next token of the row
        #   starts at loop 1 in the next step, whatever loop the other rows are at.
        while live:
            rows = torch.tensor(live, device=self.device)
            pos = torch.tensor([cache.e_len[r] for r in live], device=self.device)
            loops = [loop[r] for r in live]
            plan = self._decode_plan(cache, live, pos, loops)
            cos, sin = body.rotary_emb(pos, self.dtype)  # (R, d)
            h = self._run_layers(x[rows], cos, sin, self._cached_attend(cache, plan, rows, pos))
            self._count(work, len(live), float((pos + 1).sum()))
            t = torch.tensor(loops, device=self.device)
            stop = self._finish_loop(t, rows, pos, h, state, trace, work)
            x[rows] = h
            stops = stop.tolist()
            self._commit_kv(cache, live, loops, stops, h, cos, sin, work)
            finished = []
            for i, r in enumerate(live):
                computed[r] += 1
                if not stops[i]:
                    loop[r] += 1
                    continue
                position = cache.e_len[r]
                cache.exit_loop[r, position] = loop[r]
                cache.e_len[r] += 1
                yield self._record(
                    request[r], position, tokens[r], "generated", state, trace, r, computed[r]
                )
                if generated[r] >= max_new_tokens or tokens[r] == eos_token_id:
                    prompt = next(queued, None)
                    if prompt is None:
                        finished.append(r)
                        continue
                    request[r], next_request = next_request, next_request + 1
                    logits = self._load_request(cache, r, prompt, max_new_tokens)
                    tokens[r], generated[r] = sampler(logits, request[r]), 1
                else:
                    tokens[r] = sampler(state.out_logits[r], request[r])
                    generated[r] += 1
                loop[r], computed[r] = 1, 0
                state.reset(r)
                if trace is not None:
                    trace.reset(r)
                x[r] = body.embed_tokens.weight[tokens[r]]
                self._start_token(work, cache.e_len[r])
            live = [r for r in live if r not in finished]

    def _load_request(
        self, cache: DepthKVCache, row: int, prompt: list[int], max_new_tokens: int
    ) -> Tensor:
        """Prefill a queued prompt alone into ``row``; returns its next-token logits (V,)."""
        if len(prompt) + max_new_tokens > cache.capacity:
            raise ValueError(
                f"a queued prompt of {len(prompt)} tokens + {max_new_tokens} new ones does "
                f"not fit the batch's {cache.capacity} cache slots"
            )
        start, start_cpu = time.perf_counter(), time.process_time()
        result = self.prefill([prompt])
        self.queued_prefill_work = self.queued_prefill_work + result.work
        self.queued_prefill_s += time.perf_counter() - start
        self.queued_prefill_cpu_s += time.process_time() - start_cpu
        cache.load_row(row, result.cache, extra=max_new_tokens)
        return result.logits[0, len(prompt) - 1]

    def _start_token(self, work: Work, position: int) -> None:
        work.token_loops_full += self.n_loops
        work.flops_full += self.flops.loops(1, position + 1) * self.n_loops
        work.flops_full += self.flops.head * self.full_heads

    def _decode_plan(
        self, cache: DepthKVCache, live: list[int], pos: Tensor, loops: list[int]
    ) -> DecodePlan:
        """Which terminal entries each row sees at its loop (its own slot included)."""
        width = int(pos.max()) + 1
        slots = torch.arange(width, device=self.device)
        exit_loop = cache.exit_loop[torch.tensor(live, device=self.device), :width].long()
        t = torch.tensor(loops, device=self.device)[:, None]
        visible = self.policy.terminal_visible(exit_loop, t, self.n_loops)
        visible &= slots[None, :] < pos[:, None]
        visible |= slots[None, :] == pos[:, None]
        c_lens = [cache.loop_len(u, r) for r, u in zip(live, loops, strict=True)]
        plan = DecodePlan(
            rows=live,
            batch=cache.batch,
            pos=pos,
            loops=loops,
            visible=visible,
            c_lens=c_lens,
            n_loops=self.n_loops,
            dtype=self.dtype,
        )
        cache.note_scratch(plan.nbytes())
        return plan

    def _cached_attend(self, cache, plan: DecodePlan, rows: Tensor, pos: Tensor):
        def for_layer(index: int) -> Attend:
            ek, ev = cache.e_k[index], cache.e_v[index]
            stores = {t: cache.loops[t - 1] for t in set(plan.loops) if t < self.n_loops}

            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (R, heads, d)
                ek[rows, pos] = k  # its own loop-t K/V, into its terminal slot
                ev[rows, pos] = v
                return plan.attend(q[:, None], (ek, ev), stores, index)[:, 0]

            return attend

        return for_layer

    def _commit_kv(self, cache, live, loops, stops, h, cos, sin, work) -> None:
        """After a step: loop-t K/V of tokens going on (and, under recompute-kv, of tokens
        stopping before the last loop) into the loop-t store; frozen projections in.
        The moving entries of all layers are read out of the terminal slots in one gather."""
        moving = [
            i
            for i, stop in enumerate(stops)
            if not stop or (self.policy.frozen_terminal and loops[i] < self.n_loops)
        ]
        if moving:
            index = torch.tensor([live[i] for i in moving], device=self.device)
            slots = torch.tensor([cache.e_len[live[i]] for i in moving], device=self.device)
            k, v = cache.e_k[:, index, slots], cache.e_v[:, index, slots]  # (L, M, nkv, d)
            by_loop = sorted({loops[i] for i in moving})
            for t in by_loop:
                group = [j for j, i in enumerate(moving) if loops[i] == t]
                rows = [live[moving[j]] for j in group]
                if len(by_loop) == 1:
                    cache.loop(t).append(rows, k, v)
                else:
                    sel = torch.tensor(group, device=self.device)
                    cache.loop(t).append(rows, k[:, sel], v[:, sel])
        frozen = [i for i in moving if stops[i]]
        if frozen:
            sel = torch.tensor(frozen, device=self.device)
            index = torch.tensor([live[i] for i in frozen], device=self.device)
            slots = torch.tensor([cache.e_len[live[i]] for i in frozen], device=self.device)
            for layer, (k, v) in enumerate(self._frozen_kv(h[sel], cos[sel], sin[sel], work)):
                cache.e_k[layer][index, slots] = k
                cache.e_v[layer][index, slots] = v

    def _record(self, row, position, token_id, phase, state, trace, slot, computed) -> TokenRecord:
        loops = trace.record(slot, computed, self.top_k) if trace is not None else {}
        return TokenRecord(
            row=row,
            position=position,
            token_id=int(token_id),
            phase=phase,
            exit_loop=int(state.reported[slot]),
            loops_computed=computed,
            **loops,
        )

    def prompt_records(self, prefill: PrefillResult) -> Iterator[TokenRecord]:
        """One record per prompt position of ``prefill``, in order, row by row."""
        s = prefill.ids.shape[1]
        for row, n in enumerate(prefill.lengths):
            for position in range(n):
                yield self._record(
                    row,
                    position,
                    prefill.ids[row, position],
                    "prompt",
                    prefill.state,
                    prefill.trace,
                    row * s + position,
                    int(prefill.loops_computed[row, position]),
                )


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
