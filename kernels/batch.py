"""Continuous depth batching across runs: many requests share one depth-pipelined decode.

    batch = ContinuousBatch(loaded, max_rows=8)
    batch.add("run-1", "def add(a, b):", GenerationParams(q=0.7))
    while batch.busy:
        for key, update in batch.step().items():
            ...  # update.events (TokenEvent), update.summary once the run has left

A request joins at the next step: its prompt is prefilled alone, by its own engine, and
loaded into a free row of the batch's cache *between* steps (one prefill per step, so a
joining prompt delays the rows already decoding by at most that one prefill). Then each
step runs one loop for every row (:class:`kernels.scheduler.Scheduler` plans it,
:meth:`kernels.engine.Engine.run_step` computes it), each row with its own exit rule, q,
loop cap, KV policy, sampler, token budget and end token. A row leaves when its run
finishes or is cancelled, and the others go on.

A run's tokens, exit loops and events are those :func:`kernels.stream.generate_stream`
gives for it alone (same seed, same settings): its prefill is the same call, its sampler
draws from its own generator, and the decode differs only in the rounding of batched
matrix products. The events' ``kv_bytes`` are the shared cache's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from kernels.checkpoint import LoadedModel
from kernels.engine import Engine
from kernels.rules import kv_policy
from kernels.sampling import Sampler
from kernels.scheduler import RowSettings, Scheduler
from kernels.stream import (
    GenerationParams,
    RunReport,
    TokenEvent,
    encode_request,
    end_token,
    request_engine,
)
from kernels.work import Work

LENS_WIDTH = 50  # the widest logit lens a request may ask for (GenerationParams.top_k)


@dataclass
class RunUpdate:
    """What one step produced for one run."""

    events: list[TokenEvent] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # set once the run has left the batch


@dataclass
class _Run:
    key: Hashable
    prompt: list[int]
    params: GenerationParams
    settings: RowSettings
    sampler: Sampler
    report: RunReport | None = None


class ContinuousBatch:
    """Up to ``max_rows`` runs of one model in one depth-pipelined decode.

    Args:
        loaded: the model (its tokenizer encodes prompts and decodes token texts).
        max_rows: rows of the decode batch; more requests wait in order.
        max_loops: the deepest loop cap a request may ask for (default 2 × the
            checkpoint's loop count, the bound the playground accepts).
        capacity: positions per row, prompt and new tokens (default the model's).
        lockstep: the baseline that continuous depth batching improves on: a row whose
            token stopped waits until every row's token has stopped (the deepest row
            sets the pace). Output is the same; only the benchmarks use it.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        max_rows: int = 8,
        max_loops: int | None = None,
        capacity: int | None = None,
        lockstep: bool = False,
    ) -> None:
        self.loaded, self.lockstep = loaded, lockstep
        self.capacity = capacity or loaded.config.max_position_embeddings
        self.held: list[tuple[int, int]] = []  # lockstep: (row, next token) not yet started
        self.max_loops = max_loops or 2 * loaded.config.total_ut_steps
        lens = min(LENS_WIDTH, loaded.config.vocab_size)
        self.engine = Engine(loaded.model, loops=self.max_loops, top_k=lens, trace=True)
        cache = self.engine.new_cache(max_rows, self.capacity)
        self.decoding = self.engine.decode_state(cache, kl=True)
        self.scheduler = Scheduler(max_rows)
        self.eos = end_token(loaded)
        self.waiting: deque[_Run] = deque()
        self.runs: dict[Hashable, _Run] = {}
        self.cancelled: set[Hashable] = set()

    @property
    def busy(self) -> bool:
        return bool(self.runs)

    def add(self, key: Hashable, prompt_text: str, params: GenerationParams) -> None:
        """Queue a request; it joins at the next step with a free row. ValueError names a
        bad request (nothing is queued then)."""
        if key in self.runs:
            raise ValueError(f"request {key!r} is already in the batch")
        prompt = encode_request(self.loaded, prompt_text, params)
        loops = params.loops or self.loaded.config.total_ut_steps
        if loops > self.max_loops:
            raise ValueError(f"loops must be at most {self.max_loops}, got {loops}")
        if len(prompt) + params.max_new_tokens > self.capacity:
            raise ValueError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
                f"exceeds the batch's {self.capacity} positions per row"
            )
        settings = RowSettings(
            rule=params.rule(),
            policy=kv_policy(params.kv_policy),
            n_loops=loops,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos,
            seed=params.seed,
        )
        run = _Run(key, prompt, params, settings, params.sampler())
        self.runs[key] = run
        self.waiting.append(run)

    def cancel(self, key: Hashable) -> None:
        """The request leaves at the next step (its summary says "stopped")."""
        if key in self.runs:
            self.cancelled.add(key)

    def step(self) -> dict[Hashable, RunUpdate]:
        """Admit one waiting request, run one loop for every row, and return each run's
        new events (and summary when it has left)."""
        updates: dict[Hashable, RunUpdate] = {}
        for key in list(self.cancelled):
            self._leave(key, "stopped", updates)
        self.cancelled.clear()
        row = self.scheduler.free_row()
        if self.waiting and row is not None:
            self._join(self.waiting.popleft(), row, updates)
        plan = self.scheduler.plan()
        if plan is None:
            return updates
        stops = self.engine.run_step(plan, self.decoding)
        cache, state = self.decoding.cache, self.decoding.state
        for done in self.scheduler.advance(plan, stops):
            run = self.runs[done.key]
            assert run.report is not None
            record = self.engine.decoded_record(self.decoding, done)
            event = run.report.generated(
                record, self.decoding.works[done.row], cache, run.params.top_k
            )
            updates.setdefault(done.key, RunUpdate()).events.append(event)
            if done.finished:
                stopped = "eos" if done.token == self.eos else "max_new_tokens"
                self._leave(done.key, stopped, updates, row=done.row)
                continue
            self.held.append((done.row, run.sampler(state.out_logits[done.row], 0)))
        if not self.lockstep or self.scheduler.plan() is None:
            for row, token in self.held:
                settings = self.scheduler.rows[row]
                assert settings is not None
                self.scheduler.next_token(row, token)
                self.engine.start_token(self.decoding, row, token, settings.settings)
            self.held = []
        return updates

    def _join(self, run: _Run, row: int, updates: dict[Hashable, RunUpdate]) -> None:
        """Prefill the request alone (its own engine, as it would run alone) into ``row``."""
        params = run.params
        engine: Engine = request_engine(self.loaded, params)
        run.report = RunReport(self.loaded, run.prompt, engine)
        prefill = engine.prefill([run.prompt])
        assert prefill.cache is not None
        update = updates.setdefault(run.key, RunUpdate())
        update.events.extend(run.report.prompt_events(prefill, params.top_k))
        if params.max_new_tokens == 0:
            self._leave(run.key, "max_new_tokens", updates)
            return
        cache = self.decoding.cache
        cache.load_row(row, prefill.cache, extra=params.max_new_tokens)
        self.decoding.works[row] = Work()
        token = run.sampler(prefill.logits[0, len(run.prompt) - 1], 0)
        self.scheduler.start(row, run.key, run.settings, token, cache.e_len[row])
        self.engine.start_token(self.decoding, row, token, run.settings)

    def _leave(
        self,
        key: Hashable,
        stopped: str,
        updates: dict[Hashable, RunUpdate],
        row: int | None = None,
    ) -> None:
        run = self.runs.pop(key, None)
        if run is None:
            return
        if run in self.waiting:
            self.waiting.remove(run)
        freed = self.scheduler.cancel(key) if row is None else row
        self.held = [(r, token) for r, token in self.held if r != freed]
        update = updates.setdefault(key, RunUpdate())
        if run.report is None:  # cancelled before it joined
            update.summary = {"stopped": stopped, "generated_tokens": 0}
            return
        work = self.decoding.works[freed] if freed is not None else Work()
        update.summary = run.report.summary(work, self.decoding.cache, stopped)
