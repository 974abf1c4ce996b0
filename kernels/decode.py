"""The decode driver: plan → run → advance → records, then sample → start, step by step.

:meth:`kernels.engine.Engine.decode` (one request's rows) and
:class:`kernels.batch.ContinuousBatch` (many requests' rows, joining and leaving) both
step one :class:`Decoder`: the scheduler (:mod:`kernels.scheduler`) decides in plain
Python, the step runner (:mod:`kernels.runner`) computes in tensors, and the caller only
samples each stopped row's next token (and does what its own requests need with the
records), so there is one decode loop to keep exact.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Literal

from torch import Tensor

from kernels.runner import DecodeState
from kernels.scheduler import Done, RowSettings, Scheduler

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

    def start(self, starts: list[tuple[int, Hashable, RowSettings, int]]) -> None:
        """Requests take free rows: (row, request key, its settings, its first token),
        whose tokens start at loop 1 in the next step (written together)."""
        if not starts:
            return
        cache = self.decoding.cache
        for row, key, settings, token in starts:
            self.scheduler.start(row, key, settings, token, cache.e_len[row])
        self.runner.start_tokens(
            self.decoding, [s[0] for s in starts], [s[3] for s in starts], [s[2] for s in starts]
        )

    def step(self) -> list[tuple[Done, TokenRecord]] | None:
        """One loop for every planned row: the tokens that stopped, each with its record
        (read together); None when no row has a token to compute."""
        plan = self.scheduler.plan(dense=self.lockstep == "dense")
        if plan is None:
            return None
        stops = self.runner.run_step(plan, self.decoding)
        done = self.scheduler.advance(plan, stops)
        return list(zip(done, self.runner.decoded_records(self.decoding, done), strict=True))

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
        """``row`` has left: a token held for it is dropped."""
        self.held = [(r, token) for r, token in self.held if r != row]
