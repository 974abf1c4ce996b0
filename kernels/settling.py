"""The settling loop of a position and how well an exit rule matches it.

A position whose every loop was computed has a logit-lens top-1 per loop, loops 1..T.
Its *settling loop* is the first loop from which the top-1 equals the last loop's top-1
and stays equal to the end: the earliest exit that would not have changed the position's
prediction (the oracle exit). A top-1 that agrees with the last loop early, flips away
and comes back settles only where it comes back for good.

Calibration compares an exit rule's exit loop with the settling loop, position by
position: exiting *after* it wastes ``exit − settle`` loops, exiting *before* it may change
the prediction, exiting *at* it is the oracle. Loops are numbered from 1, as in
``kernels.exits``. Pure Python, no tensors: callers pass what they already hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def settling_loop(top1: Sequence[int]) -> int:
    """The first loop (1-based) from which ``top1`` equals its last entry and stays so.

    Args:
        top1: the position's logit-lens top-1 token id after loops 1..T, in loop order.

    Returns:
        A loop in 1..T; T when the loop before the last disagrees with it.
    """
    if not top1:
        raise ValueError("settling_loop needs the top-1 of at least one loop")
    final = top1[-1]
    loop = len(top1)
    while loop > 1 and top1[loop - 2] == final:
        loop -= 1
    return loop


@dataclass(frozen=True)
class Calibration:
    """How exit loops fall against settling loops over a set of positions.

    ``after + at + before == positions``; the shares are those counts over ``positions``
    (all zero when there are none). ``wasted_loops`` sums ``exit − settle`` over the
    positions that exited after settling; ``executed_loops`` sums every exit loop, so
    ``wasted_share`` is the part of the executed depth the oracle would not have run.
    """

    positions: int
    after: int
    at: int
    before: int
    wasted_loops: int
    executed_loops: int

    def _share(self, count: int) -> float:
        return count / self.positions if self.positions else 0.0

    @property
    def after_share(self) -> float:
        return self._share(self.after)

    @property
    def at_share(self) -> float:
        return self._share(self.at)

    @property
    def before_share(self) -> float:
        return self._share(self.before)

    @property
    def wasted_share(self) -> float:
        return self.wasted_loops / self.executed_loops if self.executed_loops else 0.0

    def as_dict(self) -> dict[str, float | int]:
        """JSON-safe counts and shares, for reports and pages."""
        return {
            "positions": self.positions,
            "after": self.after,
            "at": self.at,
            "before": self.before,
            "after_share": self.after_share,
            "at_share": self.at_share,
            "before_share": self.before_share,
            "wasted_loops": self.wasted_loops,
            "executed_loops": self.executed_loops,
            "wasted_share": self.wasted_share,
        }


def calibration(pairs: Iterable[tuple[int, int]]) -> Calibration:
    """Summarise ``(exit_loop, settling_loop)`` pairs, one per position.

    Args:
        pairs: per position, the loop it exited at and its settling loop (both 1-based).
    """
    after = at = before = wasted = executed = 0
    for exit_loop, settle in pairs:
        if exit_loop < 1 or settle < 1:
            raise ValueError(f"loops are numbered from 1, got exit {exit_loop}, settle {settle}")
        executed += exit_loop
        if exit_loop > settle:
            after += 1
            wasted += exit_loop - settle
        elif exit_loop == settle:
            at += 1
        else:
            before += 1
    return Calibration(
        positions=after + at + before,
        after=after,
        at=at,
        before=before,
        wasted_loops=wasted,
        executed_loops=executed,
    )
