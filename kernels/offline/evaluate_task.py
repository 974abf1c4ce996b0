"""Held-out measurements of a task model (:mod:`kernels.offline.tasks`), for its card.

All runs are the real skipping engine's prefill over problem + answer (teacher forcing):
an answer (a sum; one query's letter) counts as right when each of its positions' output
argmax is the answer's next character, which is exactly when greedy decoding would write
it (the exits and the K/V each position sees are those of decoding, causally). Problems
come from seeds that no training batch uses; everything is deterministic.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.checkpoint import LoadedModel
from kernels.engine import Engine
from kernels.generate import generate_stream
from kernels.offline import tasks
from kernels.request import GenerationParams
from kernels.rules import ExitRule, Fixed, LoopSignals, QExit

QS = (0.3, 0.5, 0.7, 0.9)
EVAL_SEED = -1_000  # training batches use seeds >= 0, its validation -1 - seed


def solve(
    loaded: LoadedModel,
    ids: Tensor,
    mask: Tensor,
    rule: ExitRule,
    *,
    loops: int | None = None,
    policy: str = "best-available",
    batch: int = 128,
    planned: Tensor | None = None,
) -> dict[str, Any]:
    """One rule over sequences ids (B, S+1) whose scored positions are mask (B, S): the
    skipping engine's prefill of ids[:, :-1] predicting ids[:, 1:]. With ``planned``
    (B, S), each position exits at the loop it names instead (``rule`` is not used): the
    oracle exit of :mod:`kernels.offline.frontier`.

    Returns each scored position's correctness (``right``, (B, M)), per-sequence exact
    match over them (``solved``, (B,)), their top-1 accuracy and loss, each scored
    position's exit loop (``exit``, (B, M)), the mean exit loop of the other positions
    (``context_exit``: the prompt and the next queries), the executed fraction of
    full-depth token-loops (every position), the seconds per token of each batch's prefill and the
    largest peak KV bytes of a batch, and each scored position's top-1 (``pred``, (B, M)).
    """
    engine = Engine(loaded.model, rule, policy, loops=loops)
    solved, rights, losses, exits, context, per_token_s, preds = [], [], [], [], [], [], []
    executed = full = peak = 0
    plans = [None] * len(ids) if planned is None else planned.split(batch)
    for rows, rows_mask, plan in zip(ids.split(batch), mask.split(batch), plans, strict=False):
        seeds = None
        if plan is not None:  # a batch's plan; its rule tells rows apart by their seeds
            # the engine reads a rule's name, needs_logits and exits, which it has
            oracle = cast(ExitRule, PlannedExit(plan))
            engine = Engine(loaded.model, oracle, policy, loops=loops)
            seeds = list(range(len(rows)))
        start = time.perf_counter()
        result = engine.prefill(rows[:, :-1], seeds=seeds)
        per_token_s.append((time.perf_counter() - start) / rows_mask.numel())
        targets = rows[:, 1:]  # (b, S)
        pred = result.logits.argmax(-1)  # (b, S)
        preds.append(pred[rows_mask].view(len(rows), -1))  # (b, M)
        right = pred == targets  # (b, S)
        solved.append((right | ~rows_mask).all(-1))  # (b,)
        rights.append(right[rows_mask].view(len(rows), -1))  # (b, M)
        loss = F.cross_entropy(result.logits.float().transpose(1, 2), targets, reduction="none")
        losses.append(loss[rows_mask])  # (b, S) -> (M,)
        exits.append(result.exit_loop[rows_mask].view(len(rows), -1))  # (b, A)
        context.append(result.exit_loop[~rows_mask])  # (b * (S - A),)
        executed += result.work.token_loops_executed
        full += result.work.token_loops_full
        peak = max(peak, result.cache.peak_bytes if result.cache is not None else 0)
    return {
        "right": torch.cat(rights),
        "solved": torch.cat(solved),
        "top1": torch.cat(rights).float().mean().item(),
        "loss": torch.cat(losses).mean().item(),
        "exit": torch.cat(exits),
        "context_exit": torch.cat(context).float().mean().item(),
        "executed_fraction": executed / full,
        "per_token_s": per_token_s,
        "peak_kv_bytes": peak,
        "pred": torch.cat(preds),
    }


@dataclass(frozen=True, eq=False)
class PlannedExit:
    """Each position exits at a loop chosen in advance, ``loops[row, position]`` (B, S),
    the row read from the seed its prefill gives it (its index in the batch)."""

    loops: Tensor
    name = "oracle"
    needs_logits = False

    def exits(self, signals: LoopSignals) -> Tensor:
        return (signals.t >= self.loops[signals.seed, signals.position]) | signals.last


def accuracy(problems: list[tasks.Problem], run: dict[str, Any]) -> float:
    """Exact match over answers (a sum; a query), from a :func:`solve` run."""
    return round(tasks.unit_right(problems, run["right"]).float().mean().item(), 4)


def by_level(problems: list[tasks.Problem], exits: Tensor) -> list[dict[str, Any]]:
    """Mean exit loop of the answer positions (B, M) by their difficulty (carry chain into
    a digit's column; a query's hops at its letter); newlines left out."""
    levels = tasks.position_levels(problems)  # (B, M)
    rows = []
    for level in range(int(levels.max()) + 1):
        sel = levels == level
        if sel.any():
            rows.append(
                {
                    "level": level,
                    "positions": int(sel.sum()),
                    "mean_exit": round(exits[sel].float().mean().item(), 3),
                }
            )
    return rows


def evaluate_task(
    loaded: LoadedModel,
    settings: dict[str, Any],
    *,
    per_level: int = 60,
    q: float = 0.5,
    qs: tuple[float, ...] = QS,
    with_examples: bool = True,
) -> dict[str, Any]:
    """Every number the task card reports.

    Args:
        settings: the training settings (the task and its sizes, ``loops``).
        per_level: held-out problems per trained difficulty.
        q: the model's default q (its playground default), reported on its own.
    """
    n_loops, trained = settings["loops"], tasks.trained_levels(settings)
    problems = tasks.problems(settings, EVAL_SEED, per_level * len(trained))
    ids, mask = tasks.encode(problems)
    fixed = [accuracy(problems, solve(loaded, ids, mask, Fixed(k))) for k in range(1, n_loops + 1)]
    full = solve(loaded, ids, mask, QExit(1.0))
    runs = {x: solve(loaded, ids, mask, QExit(x)) for x in sorted({*qs, q})}
    q_rows = {
        str(x): {
            "accuracy": accuracy(problems, run),
            "avg_exit": round(run["exit"].float().mean().item(), 3),
            "avg_exit_context": round(run["context_exit"], 3),
            "executed_fraction": round(run["executed_fraction"], 4),
        }
        for x, run in runs.items()
    }
    units = tasks.unit_right(problems, full["right"])  # (B, U)
    levels = tasks.unit_levels(problems)  # (B, U)
    longer = tasks.longer_levels(settings)
    long_problems = tasks.problems(settings, EVAL_SEED - 1, per_level * len(longer), longer)
    long_ids, long_mask = tasks.encode(long_problems)
    extrapolation = {
        "levels": [longer.start, longer.stop - 1],
        "problems": len(long_problems),
        "accuracy_by_loops": [
            accuracy(
                long_problems, solve(loaded, long_ids, long_mask, Fixed(k), loops=max(k, n_loops))
            )
            for k in range(1, 2 * n_loops + 1)
        ],
        "trained_levels_accuracy_by_loops": fixed
        + [
            accuracy(problems, solve(loaded, ids, mask, Fixed(k), loops=k))
            for k in range(n_loops + 1, 2 * n_loops + 1)
        ],
    }
    return {
        "task": settings["task"],
        "difficulty": tasks.difficulty_name(settings),
        "problems": len(problems),
        "answers": units.numel(),
        "levels": [trained.start, trained.stop - 1],
        "accuracy_fixed_depth": fixed,
        "accuracy_full_depth": round(units.float().mean().item(), 4),
        "accuracy_by_level_full_depth": {
            str(c): round(units[levels == c].float().mean().item(), 4) for c in trained
        },
        "default_q": q,
        "q": q_rows,
        "exit_by_level": by_level(problems, runs[q]["exit"]),
        "extrapolation": extrapolation,
        "examples": examples(loaded, settings, q) if with_examples else [],
        "targets": targets(fixed, round(units.float().mean().item(), 4), q_rows[str(q)]),
    }


def examples(loaded: LoadedModel, settings: dict[str, Any], q: float) -> list[dict[str, Any]]:
    """One generated answer per difficulty, each token with the exit loop of the position
    that wrote it (the one before it: the prompt's last for the first)."""
    out = []
    for prompt in tasks.example_prompts(settings):
        params = GenerationParams(q=q, max_new_tokens=16, top_k=0)
        events = list(generate_stream(loaded, prompt, params))
        written = [
            (before, e) for before, e in itertools.pairwise(events) if e.phase == "generated"
        ]
        out.append(
            {
                "prompt": prompt,
                "text": "".join(e.text for _, e in written),
                "exits": [before.exit_loop for before, _ in written],
            }
        )
    return out


def targets(fixed: list[float], full: float, at_q: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's acceptance targets for the task model, measured and whether met."""
    return {
        "loop 1 exact match <= 50%": {"measured": fixed[0], "met": fixed[0] <= 0.5},
        "loop T exact match >= 95%": {"measured": fixed[-1], "met": fixed[-1] >= 0.95},
        "default q within 1 point of full depth": {
            "measured": at_q["accuracy"],
            "bound": round(full - 0.01, 4),
            "met": at_q["accuracy"] >= full - 0.01,
        },
        "default q executes <= 70% of full-depth token-loops": {
            "measured": at_q["executed_fraction"],
            "met": at_q["executed_fraction"] <= 0.7,
        },
    }
