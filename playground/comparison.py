"""Up to three runs of one prompt and model side by side: where their tokens diverge, how
their exit loops differ position by position, and their stats against each other.

Positions are compared only while every run has read the same tokens: the first position
whose token differs between runs is the divergence, and from it on the runs' positions
hold different tokens, so their depths are no longer compared. The deepest run (highest
average exit loop) is the reference for agreement: top-1 agreement counts the compared
positions where a run's prediction at its exit loop is the reference's; the
log-likelihood difference is over positions whose next token is the same in both runs,
from the stored top-k of each exit loop (a position whose next token is outside either
top-k is left out, and the count says how many were used).

A branch (``branching.BRANCH_OF``: a run started from another with a different token at
one position) is compared with the run it branched from although its prompt text is
longer: its prompt is that run's tokens up to the branch, so the positions line up and the
branch point is the divergence.

Where one run computed every loop of each compared position (a full-depth sibling, or the
run itself), its settling loops (``playground.calibration``) are the oracle the others'
exits are set against: a ring on each heatmap and a calibration row in the stats.

A comparison's mode says how its runs got their tokens: "same text" when every run after
the first was scored on the first run's tokens (``siblings.TEXT_OF``), so no position
diverges and every depth compares; "free-running" otherwise.

Used by the compare page (``views.run_compare``) and ``GET /api/v1/runs/compare/``
(whose JSON and CSV shapes are in ``serializers``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernels.settling import Calibration
from playground import charts, selectors
from playground.branching import branch_found, branch_root_prompt
from playground.calibration import calibration_against, calibration_display, token_settling
from playground.models import Run
from playground.pages import RunView, run_view, stats_display
from playground.siblings import FREE_RUNNING, MODES, SAME_TEXT, TEXT_OF

COMPARE_MAX = 3
LABELS = "ABC"
STAT_ROWS = (
    ("average_depth", "Average exit loop"),
    ("work", "Executed work"),
    ("flops", "FLOPs vs full depth"),
    ("tokens_per_s", "Tokens/s"),
    ("ttft", "Time to first token"),
    ("peak_kv", "Peak KV cache"),
)


class CompareError(ValueError):
    """Runs that cannot be compared; the message names the problem."""


class UnknownRun(CompareError):
    """A well-formed run id that names no run."""


@dataclass(frozen=True)
class Agreement:
    """A run against the deepest run over the positions both read alike."""

    top1: float | None  # fraction of ``top1_positions`` with the same top-1 prediction
    top1_positions: int
    loglik_difference: float | None  # mean nats per token, this run minus the deepest
    loglik_positions: int


@dataclass(frozen=True)
class Position:
    """One position across the runs (``None`` where a run has no token there yet)."""

    position: int
    phase: str
    tokens: list[dict[str, Any] | None]  # each run's event at this position
    same_token: bool  # every run has a token here and it is the same
    compared: bool  # before the divergence, in every run: depths are comparable
    vs_deepest: list[int | None]  # exit loop minus the deepest run's, where compared

    @property
    def exits(self) -> list[int | None]:
        return [None if token is None else token["exit_loop"] for token in self.tokens]

    @property
    def difference(self) -> int | None:
        """The spread of the exit loops (deepest minus shallowest), where compared."""
        exits = [loop for loop in self.exits if loop is not None]
        return max(exits) - min(exits) if self.compared else None


@dataclass(frozen=True)
class StatRow:
    key: str
    label: str
    values: list[str]
    differs: bool


@dataclass(frozen=True)
class Compared:
    """One run of the comparison, as its page region shows it."""

    label: str
    view: RunView
    average_exit: float | None
    agreement: Agreement | None  # None for the deepest run itself

    @property
    def run(self) -> Run:
        return self.view.run

    @property
    def state_id(self) -> str:
        return f"run-state-{self.label}"

    @property
    def figure_id(self) -> str:
        return f"heatmap-figure-{self.label}"


@dataclass(frozen=True)
class Comparison:
    runs: list[Compared]
    positions: list[Position]
    divergence: int | None  # the first position whose token differs between runs
    deepest: int  # index of the reference run
    settled: int | None = None  # index of a run with every compared settling loop known
    branch: dict[str, Any] | None = None  # where a run branched from another, if one did

    def settling(self, position: Position) -> int | None:
        """The settling loop at ``position`` of the full-depth run, where compared."""
        if self.settled is None or not position.compared:
            return None
        event = position.tokens[self.settled]
        return None if event is None else token_settling(event, self.runs[self.settled].view.loops)

    def calibration(self, index: int) -> Calibration | None:
        """Run ``index``'s exits against the full-depth run's settling loops."""
        return calibration_against(
            (exit_loop, self.settling(position))
            for position in self.positions
            if (exit_loop := position.exits[index]) is not None
        )

    @property
    def settled_label(self) -> str:
        return "" if self.settled is None else self.runs[self.settled].label

    @property
    def settling_row(self) -> list[tuple[Position, int | None]]:
        return [(position, self.settling(position)) for position in self.positions]

    @property
    def mode(self) -> str:
        first, others = self.runs[0].view.id, self.runs[1:]
        forced = [item.run.params.get(TEXT_OF) == first for item in others]
        return SAME_TEXT if forced and all(forced) else FREE_RUNNING

    @property
    def mode_label(self) -> str:
        return MODES[self.mode]

    @property
    def ids(self) -> str:
        return ",".join(item.view.id for item in self.runs)

    @property
    def live(self) -> bool:
        return not all(item.view.finished for item in self.runs)

    @property
    def stats(self) -> list[StatRow]:
        rows = [
            _row("settings", "Settings", [item.view.params_summary for item in self.runs]),
            *(
                _row(key, label, [stats_display(item.view).get(key, "—") for item in self.runs])
                for key, label in STAT_ROWS
            ),
        ]
        agreements = [item.agreement for item in self.runs]
        others = [agreement for agreement in agreements if agreement is not None]
        rows.append(
            StatRow(
                "top1",
                "Top-1 agreement with the deepest run",
                [_top1_display(agreement) for agreement in agreements],
                any(agreement.top1 not in (None, 1.0) for agreement in others),
            )
        )
        if self.settled is not None:
            rows.append(
                _row(
                    "calibration",
                    f"Exits vs the settling loops of run {self.runs[self.settled].label} "
                    "(after · at · before)",
                    [calibration_display(self.calibration(i)) for i in range(len(self.runs))],
                )
            )
        rows.append(
            StatRow(
                "loglik",
                "Log-likelihood vs the deepest run",
                [_loglik_display(agreement) for agreement in agreements],
                any(agreement.loglik_difference not in (None, 0.0) for agreement in others),
            )
        )
        return rows

    @property
    def generated(self) -> list[Position]:
        return [position for position in self.positions if position.phase == "generated"]

    @property
    def depth_rows(self) -> list[tuple[Compared, list[tuple[Position, dict | None]]]]:
        """Per run, its token at each position (for the exit-loop row)."""
        return self._rows(self.positions)

    @property
    def text_rows(self) -> list[tuple[Compared, list[tuple[Position, dict | None]]]]:
        """Per run, its token at each generated position (for the aligned text)."""
        return self._rows(self.generated)

    def _rows(
        self, positions: list[Position]
    ) -> list[tuple[Compared, list[tuple[Position, dict | None]]]]:
        return [
            (item, [(position, position.tokens[i]) for position in positions])
            for i, item in enumerate(self.runs)
        ]

    @property
    def with_figures(self) -> list[tuple[Compared, dict[str, Any]]]:
        return list(zip(self.runs, self.figures(), strict=True))

    def figures(self) -> list[dict[str, Any]]:
        """Each run's heatmap, on the same token axis."""
        width = len(self.positions)
        figures = []
        for i, item in enumerate(self.runs):
            view = item.view
            figure = charts.heatmap_figure(
                loops=view.loops, trained_loops=view.trained_loops, tokens=view.tokens
            )
            figure["layout"]["xaxis"]["range"] = [-0.5, max(width, 1) - 0.5]
            figure["layout"]["uirevision"] = "compare"
            if self.settled is not None and i != self.settled:
                reference = self.runs[self.settled].label
                charts.settling_marks(
                    figure,
                    [(p.position, loop) for p, loop in self.settling_row if loop is not None],
                    source=f"run {reference} (full depth)",
                )
            figures.append(figure)
        return figures


def _row(key: str, label: str, values: list[str]) -> StatRow:
    return StatRow(key, label, values, len(set(values)) > 1)


def _top1_display(agreement: Agreement | None) -> str:
    if agreement is None:
        return "reference (deepest run)"
    if agreement.top1 is None:
        return "—"
    return f"{100 * agreement.top1:.1f}% of {agreement.top1_positions} positions"


def _loglik_display(agreement: Agreement | None) -> str:
    if agreement is None:
        return "reference (deepest run)"
    if agreement.loglik_difference is None:
        return "—"
    return (
        f"{agreement.loglik_difference:+.4f} nats/token over {agreement.loglik_positions} positions"
    )


def compare_ids(raw: str) -> list[uuid.UUID]:
    """The run ids of a ``runs=a,b,c`` parameter; ``CompareError`` names what is wrong."""
    parts = [part.strip() for part in raw.split(",")] if raw.strip() else []
    if not parts:
        raise CompareError(f"give 1 to {COMPARE_MAX} comma-separated run ids")
    if len(parts) > COMPARE_MAX:
        raise CompareError(f"at most {COMPARE_MAX} runs can be compared, not {len(parts)}")
    ids = []
    for part in parts:
        try:
            ids.append(uuid.UUID(part))
        except ValueError:
            raise CompareError(f"{part[:40]!r} is not a run id") from None
    if len(set(ids)) < len(ids):
        raise CompareError("a run is listed more than once")
    return ids


def runs_compare(*, raw: str) -> Comparison:
    """The comparison of the runs named in ``raw`` (``runs=a,b,c``), from what is stored."""
    runs = []
    for run_id in compare_ids(raw):
        run = selectors.run_get(run_id=run_id)
        if run is None:
            raise UnknownRun(f"no run with id {run_id}")
        runs.append(run)
    if len({run.model for run in runs}) > 1:
        models = ", ".join(run.model for run in runs)
        raise CompareError(f"runs of different models cannot be compared ({models})")
    if len({branch_root_prompt(run, runs) for run in runs}) > 1:
        raise CompareError("runs of different prompts cannot be compared")
    return comparison_of(
        [run_view(run=run, tokens=list(selectors.run_tokens(run=run))) for run in runs]
    )


def _settled(views: Sequence[RunView], positions: list[Position]) -> int | None:
    """The first run whose every compared position has a settling loop, if any."""
    compared = [position for position in positions if position.compared]
    for i, view in enumerate(views):
        events = [position.tokens[i] for position in compared]
        if events and all(e is not None and token_settling(e, view.loops) for e in events):
            return i
    return None


def comparison_of(views: Sequence[RunView]) -> Comparison:
    """Align the runs' stored events position by position (plain data, no queries)."""
    by_position = [{event["position"]: event for event in view.tokens} for view in views]
    width = max((max(events, default=-1) + 1 for events in by_position), default=0)
    divergence = None
    for position in range(width):
        ids = {events[position]["token_id"] for events in by_position if position in events}
        if len(ids) > 1:
            divergence = position
            break
    averages = [_average_exit(view) for view in views]
    deepest = max(range(len(views)), key=lambda i: (averages[i] or 0, -i))
    positions = []
    for position in range(width):
        tokens = [events.get(position) for events in by_position]
        present = all(token is not None for token in tokens)
        same = present and len({token["token_id"] for token in tokens if token}) == 1
        compared = present and (divergence is None or position < divergence)
        reference = tokens[deepest]
        vs_deepest = [
            token["exit_loop"] - reference["exit_loop"]
            if compared and token is not None and reference is not None
            else None
            for token in tokens
        ]
        phase = next(token["phase"] for token in tokens if token is not None)
        positions.append(Position(position, phase, tokens, same, compared, vs_deepest))
    runs = [
        Compared(
            LABELS[i],
            view,
            averages[i],
            None if i == deepest else _agreement(positions, i, deepest),
        )
        for i, view in enumerate(views)
    ]
    found = branch_found(views)
    branch = None
    if found is not None:
        branch = found | {"label": LABELS[found["label"]], "parent": LABELS[found["parent"]]}
    return Comparison(runs, positions, divergence, deepest, _settled(views, positions), branch)


def _average_exit(view: RunView) -> float | None:
    average = (view.run.stats or {}).get("average_exit_loop")
    if average is None and view.tokens:
        average = sum(event["exit_loop"] for event in view.tokens) / len(view.tokens)
    return average


def _exit_top(event: dict[str, Any]) -> list[list[Any]]:
    """The top-k ``[token_id, text, p]`` of the loop the token exited at."""
    row = next((row for row in event["loops"] if row["loop"] == event["exit_loop"]), None)
    return list(row["top"]) if row else []


def _probability(top: list[list[Any]], token_id: int) -> float | None:
    return next((entry[2] for entry in top if entry[0] == token_id), None)


def _agreement(positions: list[Position], run: int, reference: int) -> Agreement:
    same = total = 0
    loglik, counted = 0.0, 0
    for here, following in zip(positions, [*positions[1:], None], strict=True):
        if not here.compared:
            break
        event, reference_event = here.tokens[run], here.tokens[reference]
        assert event is not None and reference_event is not None  # compared: both have one
        mine, theirs = _exit_top(event), _exit_top(reference_event)
        if mine and theirs:
            total += 1
            same += mine[0][0] == theirs[0][0]
        if following is None or not following.compared:
            continue
        next_event = following.tokens[run]
        assert next_event is not None
        next_id = next_event["token_id"]
        p_mine, p_theirs = _probability(mine, next_id), _probability(theirs, next_id)
        if p_mine and p_theirs:
            loglik += math.log(p_mine) - math.log(p_theirs)
            counted += 1
    return Agreement(
        same / total if total else None, total, loglik / counted if counted else None, counted
    )
