"""The depth-skipping engine: prefill and decode that really skip exited tokens' loops.

:class:`Engine` drives the step runner (:mod:`kernels.runner`) with the schedulers
(:mod:`kernels.scheduler`). Prefill runs the prompt positions chunk by chunk, loop by
loop. Decode is *depth-pipelined*: each step runs one loop for every sequence that still
has work, each sequence at its own loop (the layers are shared by all loops, so one batch
can mix depths). A sequence whose token exits samples its next token and starts it at
loop 1 in the next step, instead of idling until the deepest sequence of the batch is
done.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import cast

import torch
from torch import Tensor

from kernels.decode import Decoder
from kernels.model import LoopedLM
from kernels.rules import ExitRule, QExit, kv_policy
from kernels.runner import (
    DecodeState,
    PrefillResult,
    PrefillState,
    StepRunner,
    TokenState,
    Trace,
)
from kernels.sampling import Sampler
from kernels.scheduler import Done, PrefillSchedule, RowSettings, Scheduler
from kernels.work import WorkCount


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


class Engine(StepRunner):
    """Prefill and decode of one request's settings with a :class:`LoopedLM`: the
    schedulers' plans run by the step runner, every row with these settings.

    Args:
        model: the looped LM (eval mode; its dtype and device are used).
        rule: the exit rule (default Q-exit with q = 1, i.e. full depth).
        policy: KV policy name (:data:`kernels.rules.POLICIES`; default ``best-available``).
        loops: loops T at inference (default the checkpoint's ``total_ut_steps``).
        top_k: width of the per-loop logit lens recorded in traces.
        trace: record gate values per loop (default: when ``top_k`` > 0).
        seed: the request's seed, which exit rules see (for reproducible random draws).
    """

    def __init__(
        self,
        model: LoopedLM,
        rule: ExitRule | None = None,
        policy: str = "best-available",
        *,
        loops: int | None = None,
        top_k: int = 0,
        trace: bool | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(model, loops=loops, top_k=top_k, trace=trace)
        self.rule, self.policy, self.seed = rule or QExit(1.0), kv_policy(policy), seed
        self.settings = RowSettings(
            self.rule, self.policy, self.n_loops, max_new_tokens=0, seed=seed, lens=top_k
        )

    def prefill_state(
        self,
        rows: list[list[int]] | Tensor,
        attention_mask: Tensor | None = None,
        *,
        reserve: int = 0,
        keep_cache: bool = True,
        settings: list[RowSettings] | None = None,
        seeds: list[int] | None = None,
    ) -> PrefillState:
        """The runner's prefill state, every row with this engine's settings (``seeds``:
        each row's own seed instead, so its rows may be different requests)."""
        if settings is None:
            n = len(rows)
            settings = [replace(self.settings, seed=s) for s in seeds or [self.seed] * n]
        return super().prefill_state(
            rows, attention_mask, reserve=reserve, keep_cache=keep_cache, settings=settings
        )

    # -- prefill -----------------------------------------------------------------------
    @torch.no_grad()
    def prefill(
        self,
        rows: list[list[int]] | Tensor,
        attention_mask: Tensor | None = None,
        *,
        reserve: int = 0,
        keep_cache: bool = True,
        chunk: int | None = None,
        seeds: list[int] | None = None,
    ) -> PrefillResult:
        """Run every prompt position through its loops.

        Args:
            rows: token-id lists, or a (B, S) id tensor with ``attention_mask`` marking real
                tokens (padding on either side; it is moved to the right internally, where
                causal attention never lets a real token see it).
            reserve: extra cache slots per row for tokens decoded afterwards.
            keep_cache: keep every loop's K/V that decoding needs afterwards.
            chunk: positions per step (:class:`kernels.scheduler.PrefillSchedule`; default
                all of them). Chunking changes only the rounding, never an exit's rule.
            seeds: each row's own seed (default this engine's), which its rule sees.
        """
        prefilling = self.prefill_state(
            rows, attention_mask, reserve=reserve, keep_cache=keep_cache, seeds=seeds
        )
        length = prefilling.ids.shape[1]
        chunk = 1 if self.policy.sequential else chunk or length  # exit-kv: see KVPolicy
        schedule = PrefillSchedule(length, chunk, self.n_loops)
        while (step := schedule.plan()) is not None:
            schedule.advance(step, self.run_prefill_step(step, prefilling))
        return prefilling.result()

    @torch.no_grad()
    def decode(
        self,
        prefill: PrefillResult,
        *,
        max_new_tokens: int,
        sampler: Sampler | None = None,
        eos_token_id: int | None = None,
        work: WorkCount | None = None,
    ) -> Iterator[TokenRecord]:
        """Generate up to ``max_new_tokens`` per row after ``prefill`` (built with
        ``reserve >= max_new_tokens``), yielding each token once it has run its loops.

        Each row stops after its ``max_new_tokens``-th token or after ``eos_token_id``;
        the last sampled token is run too, so its exit loop is known. Executed work is
        added to ``work`` as it happens. Requests joining and leaving a running batch are
        :class:`kernels.batch.ContinuousBatch`'s, which steps the same driver.
        """
        cache = prefill.kept_cache()
        if max_new_tokens <= 0:
            return
        if cache.capacity < max(prefill.lengths) + max_new_tokens:
            raise ValueError("prefill reserve is smaller than max_new_tokens")
        sampler = sampler or Sampler()
        work = work if work is not None else WorkCount()
        b = len(prefill.lengths)
        settings = replace(self.settings, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        decoding = self.decode_state(cache, kl=self.rule.needs_logits)
        decoding.works = [work] * b  # one counter for the whole batch
        decoder = Decoder(self, decoding, Scheduler(b))
        last = torch.tensor([n - 1 for n in prefill.lengths], device=self.device)
        first = prefill.logits[torch.arange(b, device=self.device), last]  # (B, V)
        decoder.start([(row, row, settings, sampler(first[row], row)) for row in range(b)])

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
        #   under select every position computes every loop (e_j = T). Under exit-kv and
        #   first-loop-kv the terminal entry is all it keeps (no C[u]): its exit loop's
        #   K/V, or loop 1's, visible at every loop.
        # * At loop t the token attends to all of C[t] (the positions that went deeper
        #   than t: their loop-t K/V), to the terminal entries visible at t (best-available:
        #   e_j <= t, so each position is seen at loop min(t, e_j)), and to its own loop-t
        #   K/V, written to its terminal slot E[r, e_len[r]] before the layer attends
        #   (first-loop-kv writes it at loop 1 only and attends to that one after).
        # * When the token goes on to loop t+1 its loop-t K/V moves to C[t]; when it stops,
        #   its slot is committed (exit_loop = t, e_len += 1) and the next token of the row
        #   starts at loop 1 in the next step, whatever loop the other rows are at.
        # T is each row's own loop cap, and its own policy decides what it sees.
        while (stepped := decoder.step()) is not None:
            for done, record in stepped:
                yield record
                if not done.finished:  # this decode's keys are its rows
                    decoder.hold(done.row, sampler(decoder.logits(done.row), cast(int, done.key)))
            decoder.start_held()

    def decoded_records(self, decoding: DecodeState, done: list[Done]) -> list[TokenRecord]:
        """The records of the tokens that stopped in the last step, read together."""
        # Engine.decode's keys are request numbers; ContinuousBatch's keys are its own
        # and it never reads a record's ``row``
        return self._records(
            [cast(int, d.key) for d in done],
            [d.position for d in done],
            [d.token for d in done],
            "generated",
            decoding.state,
            decoding.trace,
            [d.row for d in done],
            [d.loops_computed for d in done],
        )

    def _records(
        self,
        rows: list[int],
        positions: list[int],
        token_ids: list[int],
        phase: str,
        state: TokenState,
        trace: Trace | None,
        slots: list[int],
        computed: list[int],
    ) -> list[TokenRecord]:
        if not slots:
            return []
        exits = state.reported[torch.tensor(slots, device=state.reported.device)]
        loops = (
            trace.records(slots, computed, self.top_k, exits)  # with the exits, in one read
            if trace is not None
            else [{"exit_loop": e} for e in exits.tolist()]
        )
        return [
            TokenRecord(
                row=rows[i],
                position=positions[i],
                token_id=token_ids[i],
                phase=phase,
                loops_computed=computed[i],
                **loops[i],
            )
            for i in range(len(slots))
        ]

    def prompt_records(self, prefill: PrefillResult, row: int | None = None) -> list[TokenRecord]:
        """One record per prompt position of ``prefill`` (of its row ``row``, default every
        row), in order, row by row."""
        if prefill.state is None:
            raise ValueError("this prefill kept no per-token state to report")
        s = prefill.ids.shape[1]
        chosen = range(len(prefill.lengths)) if row is None else [row]
        rows = [r for r in chosen for _ in range(prefill.lengths[r])]
        positions = [position for r in chosen for position in range(prefill.lengths[r])]
        ids, computed = prefill.ids.tolist(), prefill.loops_computed.tolist()
        return self._records(
            rows,
            positions,
            [ids[r][p] for r, p in zip(rows, positions, strict=True)],
            "prompt",
            prefill.state,
            prefill.trace,
            [r * s + p for r, p in zip(rows, positions, strict=True)],
            [computed[r][p] for r, p in zip(rows, positions, strict=True)],
        )
