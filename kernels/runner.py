"""The step runner: tensors only, one step of a prefill or of a decode at a time.

Like vLLM's ModelRunner next to its Scheduler (:mod:`kernels.scheduler`), it computes
what a plan names and decides nothing about what comes next. A token that has exited is
not computed again: in loop t only the still-active tokens go through the shared layers
(gathered into a compact batch, scattered back). An exited token keeps its exit-loop
state, and its logits are the LM head of that state. What later loops' queries see of it
is the KV policy's choice (:mod:`kernels.rules`); the depth-indexed cache
(:mod:`kernels.cache`) keeps, per position, only the loops it computed, and only the
cache's methods write it.

- :meth:`StepRunner.run_prefill_step`: one loop of one chunk of prompt positions
  (a :class:`kernels.scheduler.ChunkStep`);
- :meth:`StepRunner.run_step`: one loop for every planned decode row, each at its own
  loop (a :class:`kernels.scheduler.StepPlan`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.attention import DecodePlan, PrefillTiles, Segment, additive_mask, attend_segments
from kernels.cache import DepthKVCache
from kernels.exits import step_mass
from kernels.model import Attend, LoopedLM, padded_causal_attend
from kernels.rules import ExitRule, KVPolicy, LoopSignals
from kernels.scheduler import ChunkStep, RowSettings, StepPlan
from kernels.work import FlopModel, WorkCount


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

    def reset(self, slots: Tensor) -> None:
        """Slots (N,) start a new token: nothing computed yet."""
        for tensor in (self.gate_lambda, self.exit_p, self.cumulative, self.kl):
            tensor[:, slots] = float("nan")
        self.top_ids[:, slots] = -1
        self.top_probs[:, slots] = 0.0

    def records(
        self, slots: list[int], loops: list[int], top_k: int, exits: Tensor | None = None
    ) -> list[dict[str, Any]]:
        """Python lists of the first ``loops[i]`` loops of each slot (NaN KL -> None), and
        with ``exits`` (N,) each slot's exit loop (``exit_loop``).

        One read back from the device for all the slots (the per-loop values, the lens
        ids and probabilities, the exits, packed in one float32 tensor: ids and loops are
        exact in it): a step's stopped tokens (or a prompt's positions) are read together,
        not in small transfers per token or per field."""
        deepest, n_slots = max(loops, default=0), len(slots)
        index = torch.tensor(slots, dtype=torch.long, device=self.kl.device)
        fields = (self.gate_lambda, self.exit_p, self.cumulative, self.kl)  # (T, N) each
        parts = [torch.stack([f[:deepest, index] for f in fields]).permute(2, 0, 1)]
        if top_k:  # (N, loops, k) each
            parts.append(self.top_ids[:deepest, index, :top_k].transpose(0, 1).float())
            parts.append(self.top_probs[:deepest, index, :top_k].transpose(0, 1))
        if exits is not None:
            parts.append(exits.float()[:, None])
        rows = torch.cat([part.reshape(n_slots, -1) for part in parts], 1).tolist()
        width = deepest * top_k
        out = []
        for i, n in enumerate(loops):
            row = rows[i]
            gate, exit_p, cumulative, kl = (row[f * deepest : f * deepest + n] for f in range(4))
            top: list[list[tuple[int, float]]] = [[] for _ in range(n)]
            if top_k:
                ids, probs = row[4 * deepest : 4 * deepest + width], row[4 * deepest + width :]
                top = [
                    [(int(ids[t * top_k + j]), probs[t * top_k + j]) for j in range(top_k)]
                    for t in range(n)
                ]
            record: dict[str, Any] = {
                "gate_lambda": gate,
                "exit_p": exit_p,
                "cumulative": cumulative,
                "kl": [None if v != v else v for v in kl],
                "top": top,
            }
            if exits is not None:
                record["exit_loop"] = int(row[-1])
            out.append(record)
        return out


@dataclass
class TokenState:
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
        cls,
        n: int,
        vocab: int,
        dtype: torch.dtype,
        device: torch.device,
        kl: bool,
        seed: int | Tensor,
    ) -> TokenState:
        """``seed``: one for every slot, or each slot's (N,)."""
        return cls(
            remaining=torch.ones(n, device=device),
            cumulative=torch.zeros(n, device=device),
            gate_sum=torch.zeros(n, device=device),
            seed=torch.as_tensor(seed, dtype=torch.long, device=device).expand(n).clone(),
            reported=torch.zeros(n, dtype=torch.long, device=device),
            out_logits=torch.zeros(n, vocab, dtype=dtype, device=device),
            prev_logp=torch.zeros(n, vocab, device=device) if kl else None,
        )

    def reset(self, slots: Tensor) -> None:
        """Slots (N,) start a new token with its whole stopping mass ahead of it."""
        self.remaining[slots], self.cumulative[slots], self.reported[slots] = 1.0, 0.0, 0
        self.gate_sum[slots] = 0.0


@dataclass(frozen=True)
class LoopRules:
    """Who decides for each token of one loop call: its loop cap and its request's exit
    rule and KV policy (rows of one batch may each have their own), and the lens width
    of the call: the widest any of its rows asked for."""

    caps: Tensor  # (N,) int64
    groups: list[tuple[ExitRule, KVPolicy, Tensor | None]]  # tokens (into N); None: all
    lens: int = 0

    @property
    def needs_logits(self) -> bool:
        return any(rule.needs_logits for rule, _, _ in self.groups)

    def wants_kl(self, like: Tensor) -> Tensor | bool:
        """Which tokens' rules use the KL (the others report none, as they would alone)."""
        if len(self.groups) == 1:
            return True
        wants = torch.zeros_like(like, dtype=torch.bool)
        for rule, _, index in self.groups:
            if rule.needs_logits:
                wants[index] = True
        return wants

    def decide(self, signals: LoopSignals) -> tuple[Tensor, Tensor]:
        """-> (exits: the rule's choice of output loop, stop: stops computing), (N,) each;
        under ``select`` a token computes every loop whatever its rule chose."""
        exits = torch.zeros_like(signals.t, dtype=torch.bool)
        stop = exits.clone()
        for rule, policy, index in self.groups:
            mine = signals if index is None else signals.select(index)
            chosen = rule.exits(mine)
            halt = mine.last if policy.compute_all else chosen
            if index is None:
                return chosen, halt
            exits[index], stop[index] = chosen, halt
        return exits, stop


@dataclass(frozen=True)
class PrefillRows:
    """Each prefill row's own settings, as the step runner reads them: its loop cap,
    whether its policy freezes early exits' terminal entries, its lens, and the rows
    grouped by (rule, policy), so the rows of one prefill may be different requests."""

    settings: list[RowSettings]
    caps: Tensor  # (B,) int64
    frozen: Tensor  # (B,) bool: recompute-kv rows
    keeps: Tensor  # (B,) bool: rows whose policy keeps loop stores
    groups: list[tuple[ExitRule, KVPolicy, Tensor | None]]  # rows (into B); None: all

    @classmethod
    def of(cls, settings: list[RowSettings], device: torch.device) -> PrefillRows:
        by_kind: dict[tuple[ExitRule, KVPolicy], list[int]] = {}
        for row, s in enumerate(settings):
            by_kind.setdefault((s.rule, s.policy), []).append(row)
        groups: list[tuple[ExitRule, KVPolicy, Tensor | None]] = [
            (rule, policy, None if len(by_kind) == 1 else torch.tensor(rows, device=device))
            for (rule, policy), rows in by_kind.items()
        ]
        return cls(
            settings=settings,
            caps=torch.tensor([s.n_loops for s in settings], device=device),
            frozen=torch.tensor([s.policy.frozen_terminal for s in settings], device=device),
            keeps=torch.tensor([s.policy.loop_stores for s in settings], device=device),
            groups=groups,
        )

    @property
    def deepest(self) -> int:
        return max(s.n_loops for s in self.settings)

    @property
    def lens(self) -> int:
        return max(s.lens for s in self.settings)

    @property
    def needs_logits(self) -> bool:
        return any(s.rule.needs_logits for s in self.settings)

    @property
    def any_frozen(self) -> bool:
        return any(s.policy.frozen_terminal for s in self.settings)

    def writers(self, t: int) -> Tensor | None:
        """(B,) bool: the rows that write their loop-t K/V (first-loop-kv writes at loop 1
        only); None when every row does."""
        writes = [s.policy.writes_at(t) for s in self.settings]
        return None if all(writes) else torch.tensor(writes, device=self.caps.device)

    def rules(self, row_of: Tensor) -> LoopRules:
        """The rules of tokens of the rows ``row_of`` (N,)."""
        groups = [
            (rule, policy, None if rows is None else torch.isin(row_of, rows).nonzero().squeeze(1))
            for rule, policy, rows in self.groups
        ]
        return LoopRules(self.caps[row_of], groups, self.lens)

    def visible(self, exit_loop: Tensor, t: int) -> Tensor:
        """(B, W) bool: which terminal entries of exit loops ``exit_loop`` (B, W) each row
        sees at loop t, under its own policy and cap."""
        visible = torch.zeros_like(exit_loop, dtype=torch.bool)
        for _, policy, rows in self.groups:
            sel = slice(None) if rows is None else rows
            visible[sel] = policy.terminal_visible(exit_loop[sel], t, self.caps[sel, None])
        return visible


@dataclass
class DecodeState:
    """The step runner's tensors for one decode batch, one slot per cache row."""

    cache: DepthKVCache
    x: Tensor  # (B, H) each row's current token state
    state: TokenState  # (B, …) its stopping distribution and output logits
    trace: Trace | None  # (T, B, …)
    works: list[WorkCount]  # executed work, per row (rows may share one counter)


@dataclass
class PrefillState:
    """The step runner's tensors for one prefill: B prompts right-aligned to S positions."""

    ids: Tensor  # (B, S) token ids (pads 0)
    lengths: list[int]
    real: Tensor  # (B, S) bool, real positions
    active: Tensor  # (B, S) bool, positions still running
    x: Tensor  # (B*S, H) each position's current state
    keys: Tensor  # (B*S,) causal keys each position sees (work counts)
    cos: Tensor  # (S, d) rotary tables by position
    sin: Tensor
    cache: DepthKVCache
    state: TokenState  # (B*S, …)
    trace: Trace | None  # (T, B*S, …)
    loops_computed: Tensor  # (B*S,)
    work: WorkCount
    keep_cache: bool
    rows: PrefillRows

    def result(self) -> PrefillResult:
        """What the prefill gives once its schedule is done."""
        b, s = self.ids.shape
        return PrefillResult(
            ids=self.ids,
            lengths=self.lengths,
            logits=self.state.out_logits.view(b, s, -1) * self.real[..., None],
            exit_loop=self.state.reported.view(b, s),
            loops_computed=self.loops_computed.view(b, s),
            cache=self.cache if self.keep_cache else None,
            work=self.work,
            trace=self.trace,
            state=self.state,
            settings=self.rows.settings,
        )


@dataclass
class PrefillResult:
    ids: Tensor  # (B, S) right-aligned token ids (pads 0)
    lengths: list[int]
    logits: Tensor  # (B, S, V) each position's output logits (its exit loop); pads 0
    exit_loop: Tensor  # (B, S) reported exit loop, 0 for pads
    loops_computed: Tensor  # (B, S)
    cache: DepthKVCache | None
    work: WorkCount
    trace: Trace | None = field(default=None, repr=False)
    state: TokenState | None = field(default=None, repr=False)
    settings: list[RowSettings] = field(default_factory=list, repr=False)  # per row

    def kept_cache(self) -> DepthKVCache:
        """The cache to decode from; a prefill with ``keep_cache=False`` has none."""
        if self.cache is None:
            raise ValueError("prefill was run with keep_cache=False; nothing to decode from")
        return self.cache


class StepRunner:
    """Runs a :class:`LoopedLM`'s loops for the tokens a step names, with per-token exits
    and real skipping. One runner serves every request of a model: each request's exit
    rule, KV policy, loop cap, seed and lens width travel with its rows
    (:class:`kernels.scheduler.RowSettings`), in prefill as in decode.

    Args:
        model: the looped LM (eval mode; its dtype and device are used).
        loops: the deepest loop cap a row may have (default the checkpoint's
            ``total_ut_steps``): the depth of the caches it makes.
        top_k: the widest logit lens a row may ask for (the traces' width).
        trace: record gate values per loop (default: when ``top_k`` > 0).
    """

    def __init__(
        self,
        model: LoopedLM,
        *,
        loops: int | None = None,
        top_k: int = 0,
        trace: bool | None = None,
    ) -> None:
        self.model, self.body, self.config = model, model.model, model.config
        self.n_loops = loops or self.config.total_ut_steps
        self.top_k = top_k
        self.tracing = bool(top_k) if trace is None else trace
        self.flops = FlopModel(self.config)
        self.dtype = model.lm_head.weight.dtype
        self.device = model.lm_head.weight.device
        # a decode step's attention as one call over a packed copy of every row's keys,
        # or per row on views (kernels.attention.DecodePlan): on the CPU the per-row calls
        # were faster (benchmarks in kernels/README.md); elsewhere launches cost more
        self.packed_attention = self.device.type != "cpu"

    def full_heads(self, cap: int) -> int:
        """LM-head calls per token of the full-depth baseline of a row of loop cap ``cap``:
        it does what this run shows, with a trace a logit lens at every loop, else one
        call per token, at its last loop."""
        return cap if self.tracing else 1

    def new_cache(self, batch: int, capacity: int) -> DepthKVCache:
        """An empty cache for ``batch`` rows of ``capacity`` positions and this run's loops."""
        cfg = self.config
        return DepthKVCache(
            n_layers=cfg.num_hidden_layers,
            n_loops=self.n_loops,
            batch=batch,
            capacity=capacity,
            n_kv_heads=cfg.kv_heads,
            head_dim=cfg.head_size,
            dtype=self.dtype,
            device=self.device,
        )

    def _run_layers(
        self, x: Tensor, cos: Tensor, sin: Tensor, attend: Callable[[int], Attend]
    ) -> Tensor:
        for index, layer in enumerate(self.body.layers):
            x = layer(x, cos, sin, attend(index))
        return self.body.norm(x)  # the loop's normed output state

    def _report_heads(
        self,
        state: TokenState,
        slots: Tensor,
        loop: int | Tensor,
        h: Tensor,
        chosen: Tensor,
        work: WorkCount,
    ) -> None:
        """The tokens ``chosen`` (into ``slots`` (N,)) report their exit at ``loop`` (one,
        or each token's (N,)): the LM head of their states h (N, H), for them only."""
        self.flops.count_heads(work, len(chosen))
        state.out_logits[slots[chosen]] = self.model.lm_head(h[chosen])
        state.reported[slots[chosen]] = loop if isinstance(loop, int) else loop[chosen]

    def _finish_loop(
        self,
        t: int | Tensor,
        slots: Tensor,
        position: Tensor,
        h: Tensor,
        state: TokenState,
        trace: Trace | None,
        work: WorkCount,
        rules: LoopRules,
        live: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """After loop t of the tokens in ``slots`` (N,) with normed states h (N, H): gate,
        stopping mass, exit decision, output logits (one LM-head call for all of them).
        ``position`` (N,) is each token's position. ``t`` is one loop or, in decode, each
        token's own loop (N,); ``rules`` gives each token its cap, rule and policy, and
        the call its lens width. ``live`` (N,): the rows of a longer h that count; a
        dense lockstep step's idle rows go through the gate, the LM head and the lens in
        the same calls, and are dropped. Returns "stops computing" (N,), and, when the LM
        head did not run for every token here, which tokens report their exit now (N,): the
        caller runs it for them (:meth:`_report_heads`) once it has read them. Reads
        nothing back from the device."""
        loop = torch.as_tensor(t, device=h.device).expand(len(slots))  # (N,)
        last = loop >= rules.caps
        # h is (R, H): R = N, or N and the idle rows that ``live`` drops below
        lam = torch.sigmoid(self.body.gate(h).float())  # (R,)
        logits: Tensor | None = None
        logp: Tensor | None = None
        if rules.needs_logits or self.tracing:
            logits = self.model.lm_head(h)  # (R, V)
            logp = F.log_softmax(logits.float(), dim=-1)
        top: tuple[Tensor, Tensor] | None = None
        lens = min(rules.lens, self.top_k)  # the widest lens of the call's rows
        if trace is not None and lens:
            assert logp is not None  # a trace means tracing, which computed it above
            values, indices = logp.topk(lens, dim=-1)
            top = (values, indices)
        if live is not None:  # the idle rows' results are dropped: (R, …) -> (N, …)
            h, lam = h[live], lam[live]
            if logits is not None and logp is not None:
                logits, logp = logits[live], logp[live]
            top = None if top is None else (top[0][live], top[1][live])
        if logits is not None:
            self.flops.count_heads(work, len(h))
        p, remaining = step_mass(lam, state.remaining[slots], is_last=last)
        cumulative = state.cumulative[slots] + p
        gate_sum = state.gate_sum[slots] + lam
        state.remaining[slots], state.cumulative[slots] = remaining, cumulative
        state.gate_sum[slots] = gate_sum
        kl: Tensor | None = None
        if rules.needs_logits:
            # needs_logits computed logp above; the state keeps the previous loop's (kl=True)
            assert logp is not None and state.prev_logp is not None
            prev = state.prev_logp[slots]
            kl = (prev.exp() * (prev - logp)).sum(-1)  # KL(p_{t-1} ‖ p_t)
            kl = torch.where((loop >= 2) & rules.wants_kl(kl), kl, float("nan"))
            state.prev_logp[slots] = logp
        signals = LoopSignals(
            t=loop,
            n_loops=rules.caps,
            cumulative=cumulative,
            kl=kl,
            gate=lam,
            gate_sum=gate_sum,
            seed=state.seed[slots],
            position=position,
        )
        exits, stop = rules.decide(signals)  # (N,) each
        if trace is not None:
            trace.gate_lambda[loop - 1, slots] = lam
            trace.exit_p[loop - 1, slots] = p
            trace.cumulative[loop - 1, slots] = cumulative
            if kl is not None:
                trace.kl[loop - 1, slots] = kl  # NaN at loop 1
            if top is not None:
                values, indices = top
                trace.top_ids[loop - 1, slots, :lens] = indices
                trace.top_probs[loop - 1, slots, :lens] = values.exp()
        report = exits & (state.reported[slots] == 0)
        if logits is None:
            return stop, report
        # every token's logits are here: the reporting ones' are kept without a read
        kept = state.out_logits[slots]
        state.out_logits[slots] = torch.where(report[:, None], logits, kept)
        state.reported[slots] = torch.where(report, loop, state.reported[slots])
        return stop, None

    def _frozen_kv(
        self, h: Tensor, cos: Tensor, sin: Tensor, work: WorkCount
    ) -> list[tuple[Tensor, Tensor]]:
        """recompute-kv: each layer's K/V of frozen states h (M, H) -> [(k, v)] per layer."""
        self.flops.count_projections(work, len(h))
        return [
            layer.self_attn.kv(layer.input_layernorm(h), cos, sin)
            for layer in self.body.decoder_layers
        ]

    # -- prefill -----------------------------------------------------------------------
    def prefill_state(
        self,
        rows: list[list[int]] | Tensor,
        attention_mask: Tensor | None = None,
        *,
        reserve: int = 0,
        keep_cache: bool = True,
        settings: list[RowSettings],
    ) -> PrefillState:
        """The tensors of a prefill not yet run (see :meth:`kernels.engine.Engine.prefill`
        for the arguments); ``settings``: each row's request (its rule, policy, cap, seed
        and lens), so the rows of one prefill may be different requests."""
        ids, lengths = _right_aligned(rows, attention_mask, self.device)
        b, s = ids.shape
        if len(settings) != b:
            raise ValueError(f"{len(settings)} row settings for {b} rows")
        rows_of = PrefillRows.of(settings, self.device)
        if rows_of.deepest > self.n_loops:
            raise ValueError(f"a {rows_of.deepest}-loop row exceeds this runner's {self.n_loops}")
        seed = torch.tensor([st.seed for st in settings], dtype=torch.long).repeat_interleave(s)
        real = torch.arange(s, device=self.device)[None, :] < torch.tensor(lengths)[:, None].to(
            self.device
        )
        cos, sin = self.body.rotary_emb(torch.arange(s, device=self.device), self.dtype)
        keys = (torch.arange(s, device=self.device) + 1).repeat(b).float()  # causal keys seen
        work = WorkCount()
        for n, st in zip(lengths, settings, strict=True):
            self.flops.count_full(work, n, n * (n + 1) / 2, st.n_loops, self.full_heads(st.n_loops))
        tracing = self.tracing
        return PrefillState(
            ids=ids,
            lengths=lengths,
            real=real,
            active=real.clone(),
            x=self.body.embed_tokens(ids).flatten(0, 1),
            keys=keys,
            cos=cos,
            sin=sin,
            cache=self.new_cache(b, s + reserve),
            state=TokenState.create(
                b * s,
                self.config.vocab_size,
                self.dtype,
                self.device,
                rows_of.needs_logits,
                seed,
            ),
            trace=Trace.empty(self.n_loops, b * s, self.top_k, self.device) if tracing else None,
            loops_computed=torch.zeros(b * s, dtype=torch.long, device=self.device),
            work=work,
            keep_cache=keep_cache,
            rows=rows_of,
        )

    def prompt_work(self, prefill: PrefillResult, row: int) -> WorkCount:
        """The work of row ``row`` of a prefill, from the loops its positions computed:
        the rows of one prefill may be different requests, each reporting its own. The same
        counts as the prefill's ``work`` (its sum over the rows) when its rows share their
        rule and policy; else each row counts the LM heads and projections its own rule
        and policy ask for."""
        n, mine = prefill.lengths[row], prefill.settings[row]
        loops = prefill.loops_computed[row, :n]  # (n,)
        keys = torch.arange(1, n + 1, device=loops.device)  # causal keys each position sees
        executed, seen, early = torch.stack(
            [loops.sum(), (keys * loops).sum(), (loops < mine.n_loops).sum()]
        ).tolist()
        heads = executed if self.tracing or mine.rule.needs_logits else n  # else one, at exit
        frozen = early if mine.policy.frozen_terminal else 0  # recompute-kv's projections
        work = WorkCount()
        self.flops.count_loops(work, executed, seen)
        self.flops.count_heads(work, heads)
        self.flops.count_projections(work, frozen)
        self.flops.count_full(work, n, n * (n + 1) / 2, mine.n_loops, self.full_heads(mine.n_loops))
        return work

    @torch.no_grad()
    def run_prefill_step(self, step: ChunkStep, prefilling: PrefillState) -> bool:
        """The prefill's step runner: loop ``step.loop`` of the still-running positions
        [start, stop) of every row. Returns "a position of the chunk runs on"; once none
        does, the chunk's depths are committed to the cache.

        In loop t a position sees every earlier position as in unchunked prefill: its own
        chunk's current K/V (causal), and earlier chunks' positions the way a decode step
        sees earlier tokens (the terminal entries visible at t and the loop-t store), which
        hold exactly the K/V those positions had at loop t. Host syncs: the active
        positions, and one read of "any still running"."""
        p, cache = prefilling, prefilling.cache
        lo, hi, t = step.start, step.stop, step.loop
        b, s = p.ids.shape
        chunk = p.active[:, lo:hi]  # (B, W)
        local = chunk.flatten().nonzero().squeeze(1)  # (N,) into B*W
        w = hi - lo
        row_of, cols = local // w, local % w + lo
        flat = row_of * s + cols  # (N,) into B*S
        writers = p.rows.writers(t)  # (B,) or None: first-loop-kv rows past loop 1 write nothing
        if lo == 0 and len(flat) == b * w:  # the whole prefix active: the fused causal kernel
            x = p.x.view(b, s, -1)[:, :hi]  # (B, W, H)
            attend = self._dense_attend(cache, writers)
            h = self._run_layers(x, p.cos[:hi], p.sin[:hi], attend).flatten(0, 1)
        else:
            writing = None if writers is None else writers[row_of].nonzero().squeeze(1)  # into N
            if lo == 0:
                tiles = PrefillTiles(local, b, w, self.dtype)
                attend = self._tiled_attend(cache, tiles, row_of, cols, writing)
            else:
                attend = self._chunk_attend(cache, step, row_of, cols, p.rows, writing)
            h = self._run_layers(p.x[flat], p.cos[cols], p.sin[cols], attend)
        self.flops.count_loops(p.work, len(flat), float(p.keys[flat].sum()))
        p.loops_computed[flat] += 1
        rules = p.rows.rules(row_of)
        stop, report = self._finish_loop(t, flat, cols, h, p.state, p.trace, p.work, rules)
        if report is not None and bool(report.any()):
            self._report_heads(p.state, flat, t, h, report.nonzero().squeeze(1), p.work)
        p.x[flat] = h
        p.active.view(-1)[flat[stop]] = False
        # recompute-kv tokens before their cap: a stopping one's terminal entry becomes
        # its projected state, and its loop-t K/V stays needed in the loop-t store
        freezing = p.rows.frozen[row_of] & (t < rules.caps) if p.rows.any_frozen else None
        if p.keep_cache and t < cache.n_loops:
            # loop t's K/V that stays needed: positions going on (and freezing ones)
            kept = p.active[:, lo:hi].clone()
            if freezing is not None:
                kept.view(-1)[local[freezing]] = True
            kept &= p.rows.keeps[:, None]  # exit-kv, first-loop-kv: no loop stores
            cache.keep_loop(t, kept, start=lo)
        if freezing is not None and bool((stop & freezing).any()):
            frozen = (stop & freezing).nonzero().squeeze(1)
            c = cols[frozen]
            for index, (k, v) in enumerate(self._frozen_kv(h[frozen], p.cos[c], p.sin[c], p.work)):
                cache.write_terminal(index, row_of[frozen], c, k, v)
        going_on = bool(p.active[:, lo:hi].any())
        if not going_on:
            depth = p.loops_computed.view(b, s)[:, lo:hi]
            cache.commit_prefill(depth, [min(n, hi) for n in p.lengths], start=lo)
        return going_on

    def _dense_attend(self, cache: DepthKVCache, writers: Tensor | None) -> Callable[[int], Attend]:
        """``writers`` (B,) bool: the rows whose loop-t K/V is written and attended to; the
        others attend to what their slots hold (first-loop-kv: loop 1's)."""
        causal = padded_causal_attend(None)

        def for_layer(index: int) -> Attend:
            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, S, heads, d)
                if writers is not None:
                    keep = writers[:, None, None, None]
                    k = torch.where(keep, k, cache.e_k[index][:, : k.shape[1]])
                    v = torch.where(keep, v, cache.e_v[index][:, : v.shape[1]])
                cache.write_prefix(index, k, v)
                return causal(q, k, v)

            return attend

        return for_layer

    def _tiled_attend(
        self,
        cache: DepthKVCache,
        tiles: PrefillTiles,
        rows: Tensor,
        cols: Tensor,
        writing: Tensor | None,
    ) -> Callable[[int], Attend]:
        """``writing``: the tokens (into N) whose loop-t K/V is written; None: all."""

        def for_layer(index: int) -> Attend:
            ek, ev = cache.e_k[index], cache.e_v[index]

            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (N, heads, d)
                _write_active(cache, index, rows, cols, k, v, writing)
                return tiles.attend(q, ek, ev)

            return attend

        return for_layer

    def _chunk_attend(
        self,
        cache: DepthKVCache,
        step: ChunkStep,
        rows: Tensor,
        cols: Tensor,
        rows_of: PrefillRows,
        writing: Tensor | None,
    ) -> Callable[[int], Attend]:
        """Queries of a chunk past the first: per row, the terminal entries [0, stop) (earlier
        chunks' as visible at the loop, its own chunk's causally) and the loop-t store."""
        lo, hi, t = step.start, step.stop, step.loop
        keys = torch.arange(hi, device=self.device)
        prefix = rows_of.visible(cache.exit_loop[:, :lo].long(), t)
        store = cache.loops[t - 1] if t < cache.n_loops else None
        groups = []
        for r in rows.unique().tolist():
            sel = (rows == r).nonzero().squeeze(1)  # this row's queries
            visible = keys[None, :] <= cols[sel, None]  # (n, W)
            visible[:, :lo] &= prefix[r, None, :]
            mask = additive_mask(visible[None, None], self.dtype)  # (1, 1, n, W)
            groups.append((sel, r, mask, store.lens[r] if store is not None else 0))

        def for_layer(index: int) -> Attend:
            ek, ev = cache.e_k[index], cache.e_v[index]

            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (N, heads, d)
                _write_active(cache, index, rows, cols, k, v, writing)
                out = torch.empty_like(q)
                for sel, r, mask, n in groups:
                    segments = [Segment(ek[r : r + 1, :hi], ev[r : r + 1, :hi], mask)]
                    if n:
                        assert store is not None
                        segments.append(Segment(*store.row(index, r)))
                    out[sel] = attend_segments(q[sel][None], segments)[0]
                return out

            return attend

        return for_layer

    # -- decode ------------------------------------------------------------------------
    def decode_state(self, cache: DepthKVCache, kl: bool) -> DecodeState:
        """Empty per-row tensors for decoding into ``cache`` (one slot per cache row);
        ``kl``: keep log-probs for a convergence rule (a row's rule may need them)."""
        b = cache.batch
        return DecodeState(
            cache=cache,
            x=torch.zeros(b, self.config.hidden_size, dtype=self.dtype, device=self.device),
            state=TokenState.create(b, self.config.vocab_size, self.dtype, self.device, kl, 0),
            trace=Trace.empty(cache.n_loops, b, self.top_k, self.device) if self.tracing else None,
            works=[WorkCount() for _ in range(b)],
        )

    def start_tokens(
        self,
        decoding: DecodeState,
        rows: list[int],
        tokens: list[int],
        settings: list[RowSettings],
    ) -> None:
        """Each row's next token starts at loop 1 (state and trace of its slot reset); a
        step's starts are written together, one op per tensor."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)  # (N,)
        decoding.state.reset(index)
        decoding.state.seed[index] = torch.tensor(
            [s.seed for s in settings], dtype=torch.long, device=self.device
        )
        if decoding.trace is not None:
            decoding.trace.reset(index)
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device)
        decoding.x[index] = self.body.embed_tokens.weight[ids]  # (N, H)
        for row, s in zip(rows, settings, strict=True):
            work, position = decoding.works[row], decoding.cache.e_len[row]
            self.flops.count_full(work, 1, position + 1, s.n_loops, self.full_heads(s.n_loops))

    @torch.no_grad()
    def run_step(self, plan: StepPlan, decoding: DecodeState) -> list[bool]:
        """The step runner: one loop for every planned row, each at its own loop, with its
        own rule, policy and cap. Writes the cache only through its methods (a stopping
        token's slot is committed) and returns, per live planned row, "its token stopped"
        (idle rows go through the whole loop, then are dropped).
        One read back from the device: the stops (and the exits to report), together."""
        cache, body = decoding.cache, self.body
        rows = torch.tensor(plan.rows, device=self.device)  # (R,)
        pos = torch.tensor(plan.positions, device=self.device)  # (R,)
        t = torch.tensor(plan.loops, device=self.device)  # (R,)
        caps = torch.tensor(plan.caps, device=self.device)  # (R,)
        rules = _plan_rules(plan, caps)
        attention = self._decode_plan(cache, plan, pos, t, caps, rules)
        cos, sin = body.rotary_emb(pos, self.dtype)  # (R, d)
        x = decoding.x[rows]  # (R, H)
        # the rows that write their loop-t K/V: live ones, but not first-loop-kv past loop 1
        writing = [
            i
            for i in (plan.live_index if plan.idle else range(len(plan.rows)))
            if plan.settings[i].policy.writes_at(plan.loops[i])
        ]
        live = torch.tensor(plan.live_index, device=self.device) if plan.idle else None
        writers = (
            None
            if len(writing) == len(plan.rows)
            else torch.tensor(writing, dtype=torch.long, device=self.device)
        )
        attend = self._cached_attend(cache, attention, rows, pos, writers)
        computed = self._run_layers(x, cos, sin, attend)  # (R, H)
        h = computed
        if live is not None:  # the idle rows' results are dropped: (R, …) -> (R_live, …)
            plan, rows, pos, t, caps = plan.live(), rows[live], pos[live], t[live], caps[live]
            h, cos, sin, rules = h[live], cos[live], sin[live], _plan_rules(plan, caps)
        scratch = WorkCount()
        stop, report = self._finish_loop(
            t, rows, pos, computed, decoding.state, decoding.trace, scratch, rules, live
        )
        decoding.x[rows] = h
        # the step's one read: its stops, and the tokens that still need the LM head
        stops, heads = torch.stack([stop, stop if report is None else report]).tolist()
        if report is None:
            heads = [1] * len(stops)  # the LM head ran for every row
        elif any(heads):
            chosen = torch.tensor([i for i, x in enumerate(heads) if x], device=self.device)
            self._report_heads(decoding.state, rows, t, h, chosen, scratch)
        frozen = [
            i
            for i, s in enumerate(plan.settings)
            if stops[i] and s.policy.frozen_terminal and plan.loops[i] < plan.caps[i]
        ]
        self._commit_kv(cache, plan, stops, frozen)
        if frozen:
            sel = torch.tensor(frozen, device=self.device)
            index, slots = rows[sel], pos[sel]
            for layer, (k, v) in enumerate(self._frozen_kv(h[sel], cos[sel], sin[sel], scratch)):
                cache.write_terminal(layer, index, slots, k, v)
        for i, r in enumerate(plan.rows):
            work = decoding.works[r]
            self.flops.count_loops(work, 1, plan.positions[i] + 1)
            self.flops.count_heads(work, heads[i])
            self.flops.count_projections(work, int(i in frozen))
            if stops[i]:
                cache.commit_token(r, plan.loops[i])
        return stops

    def _decode_plan(
        self,
        cache: DepthKVCache,
        plan: StepPlan,
        pos: Tensor,
        t: Tensor,
        caps: Tensor,
        rules: LoopRules,
    ) -> DecodePlan:
        """Which terminal entries each row sees at its loop (its own slot included), under
        its own policy and cap."""
        width = max(plan.positions) + 1
        slots = torch.arange(width, device=self.device)
        exit_loop = cache.exit_loop[torch.tensor(plan.rows, device=self.device), :width].long()
        visible = torch.zeros_like(exit_loop, dtype=torch.bool)  # (R, W)
        for _, policy, index in rules.groups:
            sel = slice(None) if index is None else index
            visible[sel] = policy.terminal_visible(exit_loop[sel], t[sel, None], caps[sel, None])
        visible &= slots[None, :] < pos[:, None]
        visible |= slots[None, :] == pos[:, None]
        c_lens = [cache.loop_len(u, r) for r, u in zip(plan.rows, plan.loops, strict=True)]
        offsets = None
        if self.packed_attention:
            offsets = [
                store.offsets[r] if n and (store := cache.loops[u - 1]) is not None else 0
                for r, u, n in zip(plan.rows, plan.loops, c_lens, strict=True)
            ]
        attention = DecodePlan(
            rows=plan.rows,
            batch=cache.batch,
            positions=plan.positions,
            loops=plan.loops,
            visible=visible,
            c_lens=c_lens,
            n_loops=cache.n_loops,
            dtype=self.dtype,
            c_offsets=offsets,
        )
        cache.note_scratch(attention.nbytes())
        return attention

    def _cached_attend(
        self,
        cache: DepthKVCache,
        plan: DecodePlan,
        rows: Tensor,
        pos: Tensor,
        writers: Tensor | None,
    ) -> Callable[[int], Attend]:
        """Each layer's attention; ``writers``: the rows (into R) that write their K/V
        (default all; an idle row reads its stopped token's slot instead, a first-loop-kv
        row past loop 1 its loop-1 K/V)."""
        stores = {
            t: store
            for t in set(plan.loops)
            if t < cache.n_loops and (store := cache.loops[t - 1]) is not None
        }
        w_rows, w_pos = (rows, pos) if writers is None else (rows[writers], pos[writers])

        def for_layer(index: int) -> Attend:
            def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (R, heads, d)
                if writers is not None:  # idle rows (and first-loop-kv past loop 1) write nothing
                    k, v = k[writers], v[writers]  # (R, …) -> (R_w, …)
                if len(w_rows):
                    cache.write_terminal(index, w_rows, w_pos, k, v)  # its own loop-t K/V
                terminal = (cache.e_k[index], cache.e_v[index])
                return plan.attend(q[:, None], terminal, stores, index)[:, 0]

            return attend

        return for_layer

    def _commit_kv(
        self, cache: DepthKVCache, plan: StepPlan, stops: list[bool], frozen: list[int]
    ) -> None:
        """After a step: loop-t K/V of tokens going on (and, under recompute-kv, of tokens
        stopping before their last loop) into the loop-t store. The moving entries of all
        layers are read out of the terminal slots in one gather. Policies without loop
        stores (exit-kv, first-loop-kv) move nothing."""
        moving = [
            i for i, stop in enumerate(stops) if not stop and plan.settings[i].policy.loop_stores
        ] + frozen
        if not moving:
            return
        index = torch.tensor([plan.rows[i] for i in moving], device=self.device)
        slots = torch.tensor([plan.positions[i] for i in moving], device=self.device)
        k, v = cache.e_k[:, index, slots], cache.e_v[:, index, slots]  # (L, M, nkv, d)
        by_loop = sorted({plan.loops[i] for i in moving})
        for t in by_loop:
            group = [j for j, i in enumerate(moving) if plan.loops[i] == t]
            rows = [plan.rows[moving[j]] for j in group]
            if len(by_loop) == 1:
                cache.loop(t).append(rows, k, v)
            else:
                sel = torch.tensor(group, device=self.device)
                cache.loop(t).append(rows, k[:, sel], v[:, sel])


def _write_active(
    cache: DepthKVCache,
    layer: int,
    rows: Tensor,
    cols: Tensor,
    k: Tensor,
    v: Tensor,
    writing: Tensor | None,
) -> None:
    """The active prefill tokens' loop-t K/V (N, nkv, d) into their terminal slots (rows,
    cols (N,)); ``writing``: only those tokens (into N)."""
    if writing is not None:
        rows, cols, k, v = rows[writing], cols[writing], k[writing], v[writing]
    cache.write_terminal(layer, rows, cols, k, v)


def _plan_rules(plan: StepPlan, caps: Tensor) -> LoopRules:
    """Each planned row's cap, and its rows grouped by (rule, policy)."""
    groups: dict[tuple[ExitRule, KVPolicy], list[int]] = {}
    for i, s in enumerate(plan.settings):
        groups.setdefault((s.rule, s.policy), []).append(i)
    lens = max(s.lens for s in plan.settings)
    if len(groups) == 1:
        ((rule, policy),) = groups
        return LoopRules(caps, [(rule, policy, None)], lens)
    return LoopRules(
        caps,
        [
            (rule, policy, torch.tensor(index, device=caps.device))
            for (rule, policy), index in groups.items()
        ],
        lens,
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
