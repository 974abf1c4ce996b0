"""A run's exits against the settling loops (``kernels.settling``): where the oracle would
have stopped each position, and how the run's exit rule compares.

A position's settling loop is known only where every loop up to the run's T was computed
with a logit lens (a fixed-T or q = 1 run, or the ``select`` policy, which computes every
loop and then selects): the worker stores it in the token event. A run that skips loops
gets its settling loops from a full-depth sibling scored on its text ("compare with full
depth", ``services.run_full_depth_submit``), and the compare view sets this run's exits
against that sibling's settling loops position by position.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kernels.settling import Calibration, calibration, settling_loop


def token_settling(event: Mapping[str, Any], loops: int) -> int | None:
    """The event's settling loop: as the worker stored it, or (events stored before it
    did) from its per-loop top-1 when it computed all ``loops`` loops with a lens."""
    if "settling_loop" in event:
        return event["settling_loop"]
    rows = event.get("loops", [])
    if event.get("loops_computed", 0) < loops or not all(row.get("top") for row in rows):
        return None
    return settling_loop([row["top"][0][0] for row in rows]) if rows else None


def run_calibration(tokens: Sequence[Mapping[str, Any]], loops: int) -> Calibration | None:
    """The run's own exits against its own settling loops, over the positions that have
    one; None when none has (the run skipped loops, or ran without a lens)."""
    pairs = [(event["exit_loop"], token_settling(event, loops)) for event in tokens]
    known = [(exit_loop, settle) for exit_loop, settle in pairs if settle is not None]
    return calibration(known) if known else None


def calibration_against(pairs: Iterable[tuple[int, int | None]]) -> Calibration | None:
    """``(exit loop, settling loop of the same position in a full-depth run)`` pairs, the
    positions without a settling loop left out; None when none is left."""
    known = [(exit_loop, settle) for exit_loop, settle in pairs if settle is not None]
    return calibration(known) if known else None


def calibration_display(found: Calibration | None) -> str:
    """The stats line: the shares after / at / before the settling loop and the waste."""
    if found is None:
        return "—"
    return (
        f"after {100 * found.after_share:.0f}% · at {100 * found.at_share:.0f}% · "
        f"before {100 * found.before_share:.0f}% of {found.positions} positions; "
        f"{found.wasted_loops:,} loops past settling "
        f"({100 * found.wasted_share:.1f}% of the executed loops)"
    )
