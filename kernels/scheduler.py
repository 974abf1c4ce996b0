"""The decode scheduler: plain-Python state per batch row, one small plan per step.

Like vLLM's Scheduler next to its ModelRunner, this module decides and the engine's step
runner (:mod:`kernels.runner`) computes. A row of the decode batch serves
one request: which token it is computing, at which loop, how many tokens it has sampled,
and the request's own settings (exit rule, KV policy, loop cap, token budget, end token).
Each step:

1. :meth:`Scheduler.plan` names every row with a token to compute, each at its own loop
   (depth-pipelined: rows sit at different loops, since the layers are shared by all);
2. the step runner computes that loop for those rows and says which tokens stop;
3. :meth:`Scheduler.advance` moves a going-on token to its next loop and reports a
   stopping one as :class:`Done`; the caller samples the row's next token and gives it
   back with :meth:`Scheduler.next_token` (it starts at loop 1 in the next step), or the
   row is free once its request has finished.

Rows join (:meth:`Scheduler.start`) and leave (:meth:`Scheduler.cancel`) between steps.
Nothing here holds a tensor, so the bookkeeping reads as Python and the runner stays
tensors only.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kernels.rules import ExitRule, KVPolicy


@dataclass(frozen=True)
class RowSettings:
    """One request's decode settings, fixed while it is in the batch."""

    rule: ExitRule
    policy: KVPolicy
    n_loops: int  # the loop cap T of its tokens
    max_new_tokens: int
    eos_token_id: int | None = None
    seed: int = 0  # what exit rules see (reproducible per-token draws)
    lens: int = 0  # logit-lens width it asks for, per computed loop (at most the trace's)
    draft_loops: int = 0  # self-speculation's draft depth d (0: plain decoding)
    draft_tokens: int = 0  # its draft length k

    @property
    def speculative(self) -> bool:
        return self.draft_loops > 0 and self.draft_tokens > 0


@dataclass
class RowState:
    """A row's request and its current token."""

    key: Hashable  # the request this row serves
    settings: RowSettings
    token: int  # the token being computed
    position: int  # its position: the cache slot it takes when it stops
    loop: int = 1  # the loop it computes in the next step
    computed: int = 0  # loops computed for this token so far
    generated: int = 1  # tokens sampled so far, this one included
    waiting: bool = False  # its token stopped; the next one is not sampled yet


@dataclass(frozen=True)
class StepPlan:
    """What one step computes: for each planned row, its token's loop, cap and position.

    ``idle`` (indices into the lists) names rows whose token has already stopped: a dense
    lockstep batch computes them anyway (the whole loop: layers, gate, LM head, lens), as
    one batch tensor does, and drops the results. They read the cache like the others and
    change nothing (the benchmarks' baseline).
    """

    rows: list[int]
    loops: list[int]
    caps: list[int]
    positions: list[int]
    settings: list[RowSettings]
    idle: tuple[int, ...] = ()

    @property
    def live_index(self) -> list[int]:
        """Indices of the rows whose results count."""
        return [i for i in range(len(self.rows)) if i not in self.idle]

    def live(self) -> StepPlan:
        """This plan without its idle rows."""
        if not self.idle:
            return self
        keep = self.live_index
        return StepPlan(
            rows=[self.rows[i] for i in keep],
            loops=[self.loops[i] for i in keep],
            caps=[self.caps[i] for i in keep],
            positions=[self.positions[i] for i in keep],
            settings=[self.settings[i] for i in keep],
        )


@dataclass(frozen=True)
class Done:
    """A token that stopped computing in this step (its exit loop is the runner's)."""

    row: int
    key: Hashable
    position: int
    token: int
    loops_computed: int
    finished: bool  # the request has no token to come (budget spent or end token)
    # self-speculation: "accepted" (a draft the verification agreed with) or "verified"
    # (chosen from verified logits); None for plain decoding, whose caller samples next
    mark: str | None = None


class Scheduler:
    """Up to ``max_rows`` rows, each serving one request at a time."""

    def __init__(self, max_rows: int) -> None:
        self.rows: list[RowState | None] = [None] * max_rows

    def free_row(self) -> int | None:
        return next((r for r, row in enumerate(self.rows) if row is None), None)

    def row_of(self, key: Hashable) -> int | None:
        return next((r for r, row in enumerate(self.rows) if row and row.key == key), None)

    @property
    def busy(self) -> bool:
        return any(row is not None for row in self.rows)

    def start(
        self, row: int, key: Hashable, settings: RowSettings, token: int, position: int
    ) -> None:
        """Request ``key`` takes the free ``row``; its first sampled token is ``token``."""
        held = self.rows[row]
        if held is not None:
            raise ValueError(f"row {row} is serving request {held.key!r}")
        self.rows[row] = RowState(key=key, settings=settings, token=token, position=position)

    def cancel(self, key: Hashable) -> int | None:
        """Request ``key`` leaves; returns the row it freed (None if it was not here)."""
        row = self.row_of(key)
        if row is not None:
            self.rows[row] = None
        return row

    def plan(self, dense: bool = False) -> StepPlan | None:
        """The next step's work, or None when no row has a token to compute. ``dense``:
        the waiting rows too, as idle rows at the loop and position their token stopped."""
        if not any(row and not row.waiting for row in self.rows):
            return None
        planned = [
            (r, row) for r, row in enumerate(self.rows) if row and (dense or not row.waiting)
        ]
        return StepPlan(
            rows=[r for r, _ in planned],
            loops=[row.loop for _, row in planned],
            caps=[row.settings.n_loops for _, row in planned],
            positions=[row.position for _, row in planned],
            settings=[row.settings for _, row in planned],
            idle=tuple(i for i, (_, row) in enumerate(planned) if row.waiting),
        )

    def advance(self, plan: StepPlan, stops: list[bool]) -> list[Done]:
        """Apply a step's stops (one per live planned row); returns the tokens that stopped.

        A finished request's row is freed; any other stopped row waits for
        :meth:`next_token`."""
        done = []
        for r, stop in zip(plan.live().rows, stops, strict=True):
            row = self.rows[r]
            assert row is not None
            row.computed += 1
            if not stop:
                row.loop += 1
                continue
            s = row.settings
            finished = row.generated >= s.max_new_tokens or row.token == s.eos_token_id
            done.append(Done(r, row.key, row.position, row.token, row.computed, finished))
            if finished:
                self.rows[r] = None
            else:
                row.waiting = True
        return done

    def settle(
        self, row: int, tokens: list[int], computed: list[int], marks: list[str]
    ) -> list[Done]:
        """A verification's outcome: ``row``'s current token and the drafts accepted after
        it, each with the loops it computed, stop in order (up to the first that finishes
        the request); then the row waits for its next token, or is free."""
        state = self.rows[row]
        assert state is not None, f"row {row} serves no request"
        s, done = state.settings, []
        for i, (token, n, mark) in enumerate(zip(tokens, computed, marks, strict=True)):
            if i:
                state.token, state.position = token, state.position + 1
                state.generated += 1
            finished = state.generated >= s.max_new_tokens or token == s.eos_token_id
            done.append(Done(row, state.key, state.position, token, n, finished, mark))
            if finished:
                self.rows[row] = None
                return done
        state.computed, state.waiting = computed[-1], True
        return done

    def next_token(self, row: int, token: int) -> None:
        """The waiting ``row``'s next token, sampled from its last token's logits."""
        state = self.rows[row]
        assert state is not None and state.waiting, f"row {row} is not waiting for a token"
        state.token, state.position = token, state.position + 1
        state.loop, state.computed, state.generated = 1, 0, state.generated + 1
        state.waiting = False


@dataclass(frozen=True)
class ChunkStep:
    """One prefill step: loop ``loop`` of the still-running prompt positions [start, stop)."""

    start: int
    stop: int
    loop: int


class PrefillSchedule:
    """A prompt's prefill as steps of at most ``chunk`` positions, one loop each.

    Chunk by chunk, in position order: a chunk runs loop 1, 2, … until none of its
    positions is still running (or its loop cap), then the next chunk starts at loop 1.
    Positions of a finished chunk never run again, so a later chunk sees them as a decode
    step sees earlier tokens. One step costs at most ``chunk`` token-loops, which is what
    lets a joining prompt share steps with rows already decoding.
    """

    def __init__(self, length: int, chunk: int, n_loops: int) -> None:
        if chunk < 1:
            raise ValueError(f"a prefill chunk must hold at least one position, got {chunk}")
        self.length, self.chunk, self.n_loops = length, chunk, n_loops
        self.start, self.loop = 0, 1

    def plan(self) -> ChunkStep | None:
        """The next step, or None once every position has stopped."""
        if self.start >= self.length:
            return None
        return ChunkStep(self.start, min(self.start + self.chunk, self.length), self.loop)

    def advance(self, step: ChunkStep, going_on: bool) -> None:
        """After ``step``: its chunk goes on to the next loop if a position is still
        running (never past the cap), else the next chunk starts."""
        assert step == self.plan(), "steps run in the order planned"
        if going_on and step.loop < self.n_loops:
            self.loop += 1
        else:
            self.start, self.loop = step.stop, 1
