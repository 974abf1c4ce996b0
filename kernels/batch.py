"""Continuous depth batching across runs: many requests share one depth-pipelined decode.

    batch = ContinuousBatch(loaded, max_rows=8)
    batch.add("run-1", "def add(a, b):", GenerationParams(q=0.7))
    while batch.busy:
        for key, update in batch.step().items():
            ...  # update.events (TokenEvent), update.summary once the run has left
            ...  # (or update.error, if its own work raised)

The batch owns one step runner for its model, and every request's settings travel with
its rows. A request joins once a row is free: its prompt is prefilled in chunks of at most
``prefill_chunk`` positions (:class:`kernels.scheduler.PrefillSchedule`), at most
``prefill_chunk`` position-loops per step for each joining request (one loop of a full
chunk, or every loop of a short prompt), so a joining prompt adds at most that much work
to each step of the rows already decoding. Requests waiting together with the same
prefill settings (all but the seed) are prefilled together, one row each, so a crowd
arriving at once pays for one prefill's steps, not one per request. Once its prefill is
done each is loaded into a free row of the batch's cache between steps. Then each step
runs one loop for every row (:class:`kernels.scheduler.Scheduler` plans it,
:meth:`kernels.runner.StepRunner.run_step` computes it), each row with its own exit rule,
q, loop cap, KV policy, lens width, sampler, token budget and end token. A row leaves
when its run finishes or is cancelled, and the others go on.

A row cannot fail its batch: whatever a run's own Python work raises (its sampling, its
events, its summary, its joining a row) ends that run alone, with the error in its
update, and the others go on with the tokens they get without it; a prefill that raises
fails the requests prefilled together. Only a failure of the shared decode step itself
(one tensor computation for every row) is nobody's alone: it propagates, and the caller
fails the whole batch (:mod:`workers.batching`).

A run's tokens, exit loops and events are those :func:`kernels.generate.generate_stream`
gives for it alone (same seed, same settings): its prefill is the same computation
(chunked and beside other prompts, which changes only the rounding), its sampler draws
from its own generator, and the decode differs only in the rounding of batched matrix
products. The events' ``kv_bytes`` are the shared cache's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from kernels.checkpoint import LoadedModel
from kernels.decode import Decoder
from kernels.engine import Engine
from kernels.params import BOUNDS
from kernels.report import RunReport, TokenEvent
from kernels.request import GenerationParams, encode_request, end_token
from kernels.rules import kv_policy
from kernels.runner import PrefillResult, PrefillState
from kernels.sampling import Sampler
from kernels.scheduler import PrefillSchedule, RowSettings, Scheduler
from kernels.work import WorkCount

LENS_WIDTH = int(BOUNDS["top_k"].high)  # the widest logit lens a request may ask for
# prompt position-loops a joining request prefills per step: on the shipped model one
# loop of 32 positions costs about one decode step of 8 rows
PREFILL_CHUNK = 32
# prompt positions (padded to the longest) one shared prefill holds: its per-position
# state holds (positions, vocab) logits, so eight long prompts prefill in smaller groups
PREFILL_GROUP = 2048


@dataclass
class RunUpdate:
    """What one step produced for one run."""

    events: list[TokenEvent] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # set once the run has left the batch
    error: Exception | None = None  # set instead if it left because its own work raised

    @property
    def left(self) -> bool:
        """The run has left the batch (finished, stopped or failed)."""
        return self.summary is not None or self.error is not None


@dataclass
class BatchRun:
    """A validated request and, once it is admitted, its state in the batch."""

    key: Hashable
    prompt: list[int]
    params: GenerationParams
    settings: RowSettings
    sampler: Sampler
    report: RunReport | None = None  # set once its prefill starts
    prefilling: PrefillState | None = None  # shared by the requests prefilled together
    schedule: PrefillSchedule | None = None  # (the same for all of them)
    prefill_row: int = 0  # its row of that prefill
    joined: bool = False  # its prefill is done and it holds a row

    @property
    def prefill_settings(self) -> tuple[Hashable, ...]:
        """Requests alike in these (whatever their prompts, seeds and samplers) share one
        prefill: the runner mixes any settings in a step, but a group alike runs no
        deeper, and computes no wider a lens, than each of its requests alone."""
        s = self.settings
        return (s.rule, s.policy, s.n_loops, self.params.top_k)


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
            sets the pace). ``"dense"`` computes the waiting rows in every step (layers,
            gate, LM head and lens) and drops the results, as one static batch tensor
            does; ``"compact"`` skips them.
            Output is the same; only the benchmarks use it.
        prefill_chunk: prompt positions a joining request prefills per step.
        prefill_group: prompt positions, padded to the longest, that requests prefilled
            together may hold (a request alone always may).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        max_rows: int = 8,
        max_loops: int | None = None,
        capacity: int | None = None,
        lockstep: Literal["dense", "compact"] | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
        prefill_group: int = PREFILL_GROUP,
    ) -> None:
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
        if lockstep not in (None, "dense", "compact"):
            raise ValueError(f"lockstep must be 'dense', 'compact' or None, got {lockstep!r}")
        self.loaded, self.lockstep, self.prefill_chunk = loaded, lockstep, prefill_chunk
        self.prefill_group = prefill_group
        self.capacity = capacity or loaded.config.max_position_embeddings
        self.max_loops = max_loops or 2 * loaded.config.total_ut_steps
        lens = min(LENS_WIDTH, loaded.config.vocab_size)
        self.engine = Engine(loaded.model, loops=self.max_loops, top_k=lens, trace=True)
        cache = self.engine.new_cache(max_rows, self.capacity)
        self.decoding = self.engine.decode_state(cache, kl=True)
        self.scheduler = Scheduler(max_rows)
        self.decoder = Decoder(self.engine, self.decoding, self.scheduler, lockstep)
        self.eos = end_token(loaded)
        self.waiting: deque[BatchRun] = deque()
        self.runs: dict[Hashable, BatchRun] = {}
        self.cancelled: set[Hashable] = set()
        self.joining: list[BatchRun] = []  # the requests being prefilled (together)

    @property
    def busy(self) -> bool:
        return bool(self.runs)

    @property
    def held(self) -> list[tuple[int, int]]:
        """Lockstep: (row, next token) of the rows waiting for the deepest one."""
        return self.decoder.held

    def add(self, key: Hashable, prompt_text: str | list[int], params: GenerationParams) -> None:
        """Queue a request; it joins once a row is free. ValueError names a bad request
        (nothing is queued then)."""
        self.admit(self.prepare(key, prompt_text, params))

    def prepare(
        self, key: Hashable, prompt_text: str | list[int], params: GenerationParams
    ) -> BatchRun:
        """A validated request (ValueError names the problem), not yet queued. Reads only
        the batch's fixed limits, so any thread may call it while another steps."""
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
            lens=params.top_k,
        )
        return BatchRun(key, prompt, params, settings, params.sampler())

    def admit(self, run: BatchRun) -> None:
        """Queue a prepared request (ValueError if its key is already here)."""
        if run.key in self.runs:
            raise ValueError(f"request {run.key!r} is already in the batch")
        self.runs[run.key] = run
        self.waiting.append(run)

    def cancel(self, key: Hashable) -> None:
        """The request leaves at the next step (its summary says "stopped")."""
        if key in self.runs:
            self.cancelled.add(key)

    def step(self) -> dict[Hashable, RunUpdate]:
        """Run one prefill step of the joining requests (each joins once its prefill is
        done), then one loop for every row; return each run's new events (and summary
        when it has left, or the error its own work raised). The same as :meth:`joins`
        then :meth:`decode`."""
        updates: dict[Hashable, RunUpdate] = {}
        for part in (*self.joins(), self.decode()):
            for key, update in part.items():
                merged = updates.setdefault(key, RunUpdate())
                merged.events.extend(update.events)
                merged.summary = update.summary or merged.summary
                merged.error = update.error or merged.error
        return updates

    def joins(self) -> Iterator[dict[Hashable, RunUpdate]]:
        """The first half of a step: cancelled runs leave, and joining requests prefill
        (:meth:`_prefill_budget`). Yields the cancelled runs' updates, then the joined
        runs' prompt events as soon as their prefill is done, so a server can hand them out
        before the other joiners' prefills and the decode (:meth:`decode`, the second
        half) are computed. Run it to its end before :meth:`decode`."""
        updates: dict[Hashable, RunUpdate] = {}
        for key in list(self.cancelled):
            with self._alone(key, updates):
                self._leave(key, "stopped", updates)
        self.cancelled.clear()
        if updates:
            yield updates
        budget, spent = self._prefill_budget(), 0
        while True:
            updates = {}
            try:
                if not (self.joining or self._start_prefill()):
                    return
                lead = self.joining[0]
                prefilling, schedule = lead.prefilling, lead.schedule
                assert prefilling and schedule
                while (step := schedule.plan()) is not None:
                    cost = len(self.joining) * (step.stop - step.start)  # position-loops
                    if spent and spent + cost > budget:
                        return
                    schedule.advance(step, self.engine.run_prefill_step(step, prefilling))
                    spent += cost
                prefill = prefilling.result()
            except Exception as exc:  # the group's own tensors: only its requests fail
                if not self.joining:  # no request's own: the caller fails the batch
                    raise
                for run in list(self.joining):
                    self._fail(run.key, exc, updates)
                yield updates
                continue
            group, self.joining = self.joining, []
            for run in group:
                with self._alone(run.key, updates):
                    self._join(run, prefill, updates)
            yield updates

    def _start_prefill(self) -> bool:
        """The waiting requests at the head of the queue that share their prefill settings
        start one prefill together, one row each, as many as there are free rows and
        ``prefill_group`` positions allow."""
        free = sum(row is None for row in self.scheduler.rows)
        while self.waiting and len(self.joining) < free:
            run, group = self.waiting[0], self.joining
            if group and (
                run.prefill_settings != group[0].prefill_settings
                or (len(group) + 1) * max(len(r.prompt) for r in (run, *group)) > self.prefill_group
            ):
                break
            group.append(self.waiting.popleft())
        if not self.joining:
            return False
        prompts = [run.prompt for run in self.joining]
        settings = [run.settings for run in self.joining]
        prefilling = self.engine.prefill_state(prompts, settings=settings)
        deepest = prefilling.rows.deepest
        # exit-kv prefills one position per chunk (kernels.rules.KVPolicy.sequential)
        chunk = 1 if any(st.policy.sequential for st in settings) else self.prefill_chunk
        schedule = PrefillSchedule(max(map(len, prompts)), chunk, deepest)
        for i, run in enumerate(self.joining):
            run.prefilling, run.schedule, run.prefill_row = prefilling, schedule, i
            run.report = RunReport(self.loaded, run.prompt, self.engine, run.settings)
        return True

    def _prefill_budget(self) -> int:
        """Position-loops of prefill in this step: at most ``prefill_chunk`` for each
        request that has a row to join (one loop of a full chunk, or every loop of a few
        short prompts), one request at a time; a request is admitted when a row is free.

        The budget grows with the joiners so that a crowd arriving together joins in a
        step or two instead of one request a step: each adds at most one chunk of work.
        """
        free = sum(row is None for row in self.scheduler.rows)
        joiners = min(free, len(self.joining) + len(self.waiting))
        return self.prefill_chunk * max(1, joiners)

    def decode(self) -> dict[Hashable, RunUpdate]:
        """The second half of a step: one loop for every row; the runs' new events."""
        updates: dict[Hashable, RunUpdate] = {}
        stepped = self.decoder.step()
        if stepped is None:
            return updates
        cache = self.decoding.cache
        for done, record in stepped:
            run = self.runs[done.key]
            assert run.report is not None
            with self._alone(done.key, updates):
                event = run.report.generated(
                    record, self.decoding.works[done.row], cache, run.params.top_k
                )
                updates.setdefault(done.key, RunUpdate()).events.append(event)
                if done.finished:
                    stopped = "eos" if done.token == self.eos else "max_new_tokens"
                    self._leave(done.key, stopped, updates, row=done.row)
                    continue
                self.decoder.hold(done.row, run.sampler(self.decoder.logits(done.row), 0))
        self.decoder.start_held()
        return updates

    def _join(
        self, run: BatchRun, prefill: PrefillResult, updates: dict[Hashable, RunUpdate]
    ) -> None:
        """A prefilled request (row ``run.prefill_row`` of ``prefill``) takes a free row;
        its prompt's events come out now."""
        params, row, mine = run.params, self.scheduler.free_row(), run.prefill_row
        assert run.report and prefill.cache is not None and row is not None
        run.prefilling = run.schedule = None
        run.joined = True
        update = updates.setdefault(run.key, RunUpdate())
        update.events.extend(run.report.prompt_events(prefill, params.top_k, mine))
        if params.max_new_tokens == 0:
            self._leave(run.key, "max_new_tokens", updates)
            return
        cache = self.decoding.cache
        cache.load_row(row, prefill.cache, extra=params.max_new_tokens, source_row=mine)
        self.decoding.works[row] = WorkCount()
        token = run.sampler(prefill.logits[mine, len(run.prompt) - 1], 0)
        self.decoder.start([(row, run.key, run.settings, token)])

    @contextmanager
    def _alone(self, key: Hashable, updates: dict[Hashable, RunUpdate]) -> Iterator[None]:
        """One run's own work: what it raises fails that run alone (see :meth:`_fail`)."""
        try:
            yield
        except Exception as exc:
            self._fail(key, exc, updates)

    def _fail(self, key: Hashable, error: Exception, updates: dict[Hashable, RunUpdate]) -> None:
        """The run leaves (if it has not) with ``error`` instead of a summary; its row is
        free for the next request, which loads its own state into it."""
        self._remove(key)
        update = updates.setdefault(key, RunUpdate())
        update.summary, update.error = None, error

    def _remove(self, key: Hashable, row: int | None = None) -> tuple[BatchRun | None, int | None]:
        """The run leaves the queue, its prefill or its row (``row``: one the scheduler
        freed already); returns it (None if it had left) and the row it held."""
        run = self.runs.pop(key, None)
        if run is None:
            return None, None
        if run in self.waiting:
            self.waiting.remove(run)
        if run in self.joining:  # the others' prefill goes on; its row is not used
            self.joining.remove(run)
        freed = self.scheduler.cancel(key) if row is None else row
        self.decoder.release(freed)
        return run, freed

    def _leave(
        self,
        key: Hashable,
        stopped: str,
        updates: dict[Hashable, RunUpdate],
        row: int | None = None,
    ) -> None:
        run, freed = self._remove(key, row)
        if run is None:
            return
        update = updates.setdefault(key, RunUpdate())
        if run.report is None or not run.joined:  # cancelled before it joined
            update.summary = {"stopped": stopped, "generated_tokens": 0}
            return
        work = self.decoding.works[freed] if freed is not None else WorkCount()
        update.summary = run.report.summary(work, self.decoding.cache, stopped)
