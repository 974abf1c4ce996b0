"""The decode driver: plan → run → advance → records, then sample → start, step by step.

:meth:`kernels.engine.Engine.decode` (one request's rows) and
:class:`kernels.batch.ContinuousBatch` (many requests' rows, joining and leaving) both
step one :class:`Decoder`: the scheduler (:mod:`kernels.scheduler`) decides in plain
Python, the step runner (:mod:`kernels.runner`) computes in tensors, and the caller only
samples each stopped row's next token (and does what its own requests need with the
records), so there is one decode loop to keep exact.

A speculative row (:mod:`kernels.speculate`) runs its drafts as ordinary decode steps at
its draft depth, beside the other rows; once its round is drafted, the driver verifies it
within the step and gives out the verified tokens, each marked (``Done.mark``), and
starts the next round itself: the caller samples only for unmarked tokens.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from torch import Tensor

from kernels.runner import DecodeState
from kernels.sampling import Sampler
from kernels.scheduler import Done, RowSettings, Scheduler
from kernels.speculate import Round

if TYPE_CHECKING:  # the engine drives its decode with this module
    from kernels.engine import Engine, TokenRecord


class Decoder:
    """One depth-pipelined decode over ``decoding``'s cache rows.

    Args:
        runner: the step runner (and record reader) of the model.
        decoding: the runner's per-row tensors of this decode.
        scheduler: the rows' plain-Python state, one row per cache row.
        lockstep: the baseline that continuous depth batching improves on: a stopped row's
            next token waits until every row's token has stopped; ``"dense"`` computes the
            waiting rows in every step and drops the results, ``"compact"`` skips them.
    """

    def __init__(
        self,
        runner: Engine,
        decoding: DecodeState,
        scheduler: Scheduler,
        lockstep: Literal["dense", "compact"] | None = None,
    ) -> None:
        self.runner, self.decoding, self.scheduler = runner, decoding, scheduler
        self.lockstep = lockstep
        self.held: list[tuple[int, int]] = []  # (row, next token) not started yet
        # speculative rows: their sampler and generator, the mark of their current token,
        # and their round while it is being drafted
        self.samplers: dict[int, tuple[Sampler, int]] = {}
        self.marks: dict[int, str] = {}
        self.rounds: dict[int, Round] = {}

    def start(
        self,
        starts: list[tuple[int, Hashable, RowSettings, int]],
        samplers: list[tuple[Sampler, int]] | None = None,
    ) -> None:
        """Requests take free rows: (row, request key, its settings, its first token),
        whose tokens start at loop 1 in the next step (written together). ``samplers``:
        each request's sampler and generator (a speculative request drafts with them)."""
        if not starts:
            return
        cache = self.decoding.cache
        for row, key, settings, token in starts:
            self.scheduler.start(row, key, settings, token, cache.e_len[row])
        self.runner.start_tokens(
            self.decoding, [s[0] for s in starts], [s[3] for s in starts], [s[2] for s in starts]
        )
        for i, (row, _, settings, _) in enumerate(starts):
            if settings.speculative:
                if samplers is None:
                    raise ValueError("a speculative request needs its sampler")
                self.samplers[row], self.marks[row] = samplers[i], "verified"
                self._begin(row)

    def step(self) -> list[tuple[Done, TokenRecord]] | None:
        """One loop for every planned row: the tokens that stopped, each with its record
        (read together); None when no row has a token to compute."""
        plan = self.scheduler.plan(dense=self.lockstep == "dense")
        if plan is None:
            return None
        stops = self.runner.run_step(plan, self.decoding)
        done = self.scheduler.advance(plan, stops)
        drafts = [d for d in done if d.row in self.rounds]
        plain = [
            replace(d, mark=self.marks[d.row]) if d.row in self.marks else d
            for d in done
            if d.row not in self.rounds
        ]
        for d in plain:
            if d.finished:
                self._forget(d.row)
        stepped = list(zip(plain, self.runner.decoded_records(self.decoding, plain), strict=True))
        for d in drafts:
            stepped.extend(self._drafted(d))
        return stepped

    def _begin(self, row: int) -> None:
        """A speculative row's current token has started: it drafts at its draft depth,
        unless it is the run's last token (then it runs as a plain token)."""
        state = self.scheduler.rows[row]
        assert state is not None
        s = state.settings
        length = min(s.draft_tokens, s.max_new_tokens - state.generated)
        if length <= 0 or state.token == s.eos_token_id:
            return
        sampler, stream = self.samplers[row]
        self.rounds[row] = Round(
            settings=s,
            draft=replace(s, n_loops=min(s.draft_loops, s.n_loops)),
            origin=replace(state),
            loop_lens=self.decoding.cache.loop_lens(row),
            length=length,
            sampler=sampler,
            stream=stream,
            mark=self.marks[row],
            tokens=[state.token],
        )
        state.settings = self.rounds[row].draft

    def _drafted(self, done: Done) -> list[tuple[Done, TokenRecord]]:
        """A draft token stopped: the next draft starts, or the round is verified."""
        row, rnd = done.row, self.rounds[done.row]
        assert not done.finished, "a draft never ends its run"
        token = rnd.propose(self.logits(row))
        if not rnd.drafted:
            self.scheduler.next_token(row, token)
            self.runner.start_tokens(self.decoding, [row], [token], [rnd.draft], baseline=False)
            return []
        return self._verify(row)

    def _verify(self, row: int) -> list[tuple[Done, TokenRecord]]:
        """The round's tokens in one verification pass: the accepted prefix stops (its
        K/V replaces the drafts'), and the token after it starts the next round."""
        rnd = self.rounds.pop(row)
        self.decoding.cache.truncate(row, rnd.origin.position, rnd.loop_lens)
        self.scheduler.rows[row] = rnd.origin  # the round's start, at the run's settings
        verified = self.runner.verify(self.decoding, row, rnd.tokens, rnd.settings)
        accepted, following = rnd.accept(verified.logits)
        n = accepted + 1
        marks = [rnd.mark] + ["accepted"] * accepted
        done = self.scheduler.settle(row, rnd.tokens[:n], verified.computed[:n], marks)
        self.runner.commit_verified(self.decoding, verified, len(done), rnd.settings)
        work = self.decoding.works[row]
        work.drafted_tokens += len(rnd.drafts)
        work.accepted_tokens += len(done) - 1
        records = self.runner.verified_records(verified, done)
        if done[-1].finished:
            self._forget(row)
        else:
            self.marks[row] = "verified"
            self.scheduler.next_token(row, following)
            self.runner.start_tokens(self.decoding, [row], [following], [rnd.settings])
            self._begin(row)
        return list(zip(done, records, strict=True))

    def logits(self, row: int) -> Tensor:
        """(V,) the output logits of ``row``'s last stopped token: its next token's."""
        return self.decoding.state.out_logits[row]

    def hold(self, row: int, token: int) -> None:
        """``row``'s next token, started by :meth:`start_held`."""
        self.held.append((row, token))

    def start_held(self) -> None:
        """The held next tokens start at loop 1, together (under lockstep, only once every
        row's token has stopped)."""
        if not self.held or (self.lockstep and self.scheduler.plan() is not None):
            return
        settings = []
        for row, token in self.held:
            waiting = self.scheduler.rows[row]
            assert waiting is not None
            self.scheduler.next_token(row, token)
            settings.append(waiting.settings)
        rows, tokens = (list(column) for column in zip(*self.held, strict=True))
        self.runner.start_tokens(self.decoding, rows, tokens, settings)
        self.held = []

    def release(self, row: int | None) -> None:
        """``row`` has left: a token held for it (or its speculative round) is dropped."""
        self.held = [(r, token) for r, token in self.held if r != row]
        if row is not None:
            self._forget(row)

    def _forget(self, row: int) -> None:
        for held in (self.samplers, self.marks, self.rounds):
            held.pop(row, None)
