"""``python -m kernels.offline.frontier MODEL_DIR``: the depth-accuracy frontier of a model.

Sweeps held-out data over every exit rule (Q-exit over a range of q, convergence over a
range of KL thresholds, fixed k for every k, PonderNet sampled halting, ACT over a range
of eps) and every KV policy. Each point records together: accuracy (exact match for a
task model; next-token top-1 and loss for a text model), the average exit loop, the
executed fraction of full-depth token-loops, per-token latency (median over batches of
the skipping prefill's seconds per token, and of decoding's seconds per generated token,
each with its ratio to full depth measured in the same repeat: the median of several
repeats and their range) and peak KV bytes. Written
to ``MODEL_DIR/frontier.json`` and ``frontier.csv`` (``--json PATH`` puts the JSON there,
the CSV beside it); the playground's Frontier view only reads them.

Beside the points, how much depth was really needed (:func:`depth_needed`): each scored
position's *settling loop* (:mod:`kernels.settling`, from a run that computes every loop),
the **oracle** point of each KV policy (every position exits at its settling loop), the
**calibration** of each rule setting against it (exits after / at / before the settling
loop, the wasted work, the early exits that changed the prediction; by difficulty for a
task model), and the KV policies side by side at full depth and at the default q.
``--depth-only`` recomputes just these into the stored JSON, without the latency sweep.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.engine import Engine
from kernels.offline import corpus, hops, tasks
from kernels.offline.evaluate import heldout_ids
from kernels.offline.evaluate_task import EVAL_SEED, accuracy, solve
from kernels.params import RunParams
from kernels.rules import ACT, POLICIES, Convergence, ExitRule, Fixed, Ponder, QExit
from kernels.settling import calibration, settling_loop

QS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0)
KL_THRESHOLDS = (1e-1, 1e-2, 1e-3, 1e-4)
ACT_EPS = (0.3, 0.1, 0.01)
FIELDS = (
    "rule",
    "setting",
    "policy",
    "accuracy",
    "loss",
    "avg_exit",
    "executed_fraction",
    "latency_ms_per_token",
    "latency_ratio",
    "latency_ratio_low",
    "latency_ratio_high",
    "decode_ms_per_token",
    "decode_ratio",
    "decode_ratio_low",
    "decode_ratio_high",
    "peak_kv_bytes",
)
DECODE_ROWS = 64  # prompts decoded per point (decoding is token by token: the slow part)
REPEATS = 5  # latency measurements per point: a same-run ratio moves by ±15% between them


@dataclass(frozen=True)
class Sweep:
    """Which settings of each rule to measure."""

    qs: Sequence[float] = QS
    kl_thresholds: Sequence[float] = KL_THRESHOLDS
    act_eps: Sequence[float] = ACT_EPS
    policies: Sequence[str] = tuple(POLICIES)


def rules(sweep: Sweep, n_loops: int) -> list[tuple[ExitRule, str]]:
    """Every (rule, its setting as text) of a sweep, fixed k for every k in 1..T."""
    out: list[tuple[ExitRule, str]] = [(QExit(q), f"q={q}") for q in sweep.qs]
    out += [(Convergence(kl), f"kl<{kl:g}") for kl in sweep.kl_thresholds]
    out += [(Fixed(k), f"k={k}") for k in range(1, n_loops + 1)]
    out += [(Ponder(), "seed=0")]
    out += [(ACT(eps), f"eps={eps}") for eps in sweep.act_eps]
    return out


@dataclass(frozen=True)
class Heldout:
    """Held-out sequences (B, S+1), their scored positions (B, S), and what accuracy means;
    a task's problems (exact match per answer), none for a text model (next-token top-1)."""

    ids: Tensor
    mask: Tensor
    problems: list[tasks.Problem] | None = None

    def prompts(self) -> tuple[list[list[int]], int]:
        """What decoding is timed on: prompts and how many tokens each generates (a
        problem's prompt and its answer's length; a window's first half, then the rest)."""
        if self.problems is None:
            half = self.ids.shape[1] // 2
            return self.ids[:DECODE_ROWS, :half].tolist(), half
        rows = self.problems[:DECODE_ROWS]
        return [list(p.prompt.encode()) for p in rows], len(rows[0].answer)

    @property
    def metric(self) -> str:
        return "next-token top-1" if self.problems is None else "exact match"

    def accuracy(self, run: dict[str, Any]) -> float:
        return run["top1"] if self.problems is None else accuracy(self.problems, run)


def heldout_data(path: Path, loaded: LoadedModel, size: int) -> Heldout:
    """``size`` held-out problems of a task model, or windows of a text model's text."""
    settings = json.loads((path / "training.json").read_text())["settings"]
    if settings.get("task", "text") != "text":
        problems = tasks.problems(settings, EVAL_SEED, size)
        return Heldout(*tasks.encode(problems), problems)
    ids, _ = heldout_ids(path, loaded)
    windows = corpus.windows(ids, 65, size)  # (N, 65)
    return Heldout(windows, torch.ones(size, 64, dtype=torch.bool))


def decode_seconds(
    loaded: LoadedModel,
    prompts: list[list[int]],
    new_tokens: int,
    rule: ExitRule,
    *,
    policy: str = "best-available",
    batch: int = 32,
) -> float:
    """Median over batches of greedy decoding's seconds per generated token (the prefill
    not counted), the skipping engine's continuous decode of ``new_tokens`` per prompt."""
    engine = Engine(loaded.model, rule, policy)
    per_token = []
    for start in range(0, len(prompts), batch):
        prefill = engine.prefill(prompts[start : start + batch], reserve=new_tokens)
        begin = time.perf_counter()
        generated = sum(1 for _ in engine.decode(prefill, max_new_tokens=new_tokens))
        per_token.append((time.perf_counter() - begin) / generated)
    return statistics.median(per_token)


def frontier(
    loaded: LoadedModel, heldout: Heldout, sweep: Sweep, batch: int = 32, repeats: int = REPEATS
) -> dict[str, Any]:
    """Every point of the sweep, its latency measured ``repeats`` times. In each repeat the
    latency baseline is full depth (q=1, best-available) measured in that repeat, so its
    own ratio is 1 by construction; a point's ratio is the median of its repeats' ratios,
    with their range (the noise a ratio carries). Odd repeats run the points in reverse
    order, so a drift of the machine's speed does not lean on one end of the sweep.
    After one warm-up batch of prefill and of decoding."""
    n_loops, ids, mask = loaded.config.total_ut_steps, heldout.ids, heldout.mask
    prompts, new_tokens = heldout.prompts()
    settings = [(policy, *rule) for policy in sweep.policies for rule in rules(sweep, n_loops)]
    solve(loaded, ids[:batch], mask[:batch], QExit(1.0), batch=batch)  # warm-up
    decode_seconds(loaded, prompts[:batch], new_tokens, QExit(1.0), batch=batch)
    points: dict[tuple[str, str], dict[str, Any]] = {}
    seconds: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for repeat in range(repeats):
        order = settings if repeat % 2 == 0 else settings[::-1]
        for policy, rule, setting in order:
            run = solve(loaded, ids, mask, rule, policy=policy, batch=batch)
            decode_s = decode_seconds(loaded, prompts, new_tokens, rule, policy=policy, batch=batch)
            key = (policy, setting)
            seconds.setdefault(key, []).append((statistics.median(run["per_token_s"]), decode_s))
            points.setdefault(
                key,
                {
                    "rule": rule.name,
                    "setting": setting,
                    "policy": policy,
                    "accuracy": round(heldout.accuracy(run), 4),
                    "loss": round(run["loss"], 4),
                    "avg_exit": round(run["exit"].float().mean().item(), 3),
                    "executed_fraction": round(run["executed_fraction"], 4),
                    "peak_kv_bytes": run["peak_kv_bytes"],
                },
            )
    base = seconds[("best-available", "q=1.0")]
    for key, point in points.items():
        prefill = [s[0] / b[0] for s, b in zip(seconds[key], base, strict=True)]
        decode = [s[1] / b[1] for s, b in zip(seconds[key], base, strict=True)]
        point |= {
            "latency_ms_per_token": round(1000 * statistics.median(s[0] for s in seconds[key]), 4),
            "latency_ratio": round(statistics.median(prefill), 3),
            "latency_ratio_low": round(min(prefill), 3),
            "latency_ratio_high": round(max(prefill), 3),
            "decode_ms_per_token": round(1000 * statistics.median(s[1] for s in seconds[key]), 4),
            "decode_ratio": round(statistics.median(decode), 3),
            "decode_ratio_low": round(min(decode), 3),
            "decode_ratio_high": round(max(decode), 3),
        }
    return {
        "metric": heldout.metric,
        "sequences": len(ids),
        "scored_positions": int(mask.sum()),
        "loops": n_loops,
        "threads": torch.get_num_threads(),
        "decoding": "greedy",  # how the points were run: the playground's links repeat it
        "new_tokens": new_tokens,
        "repeats": repeats,
        "latency": "median over batches of the skipping prefill's seconds per token, and of "
        f"greedy decoding's seconds per generated token ({len(prompts)} prompts, "
        f"{new_tokens} new tokens each); ratios to full depth (q=1, best-available) measured "
        f"in the same repeat: the median of {repeats} repeats and their range",
        "points": [points[(policy, setting)] for policy, _, setting in settings],
    }


DEFAULTS = RunParams()  # each rule's default setting, as the playground starts it


def settling_loops(loaded: LoadedModel, ids: Tensor, batch: int = 32) -> tuple[Tensor, Tensor]:
    """Every position's settling loop and its full-depth top-1, each (B, S), for sequences
    ids (B, S+1): every loop computed (q = 1 under ``select``) with a one-wide logit lens."""
    engine = Engine(loaded.model, QExit(1.0), "select", top_k=1)
    settle, final = [], []
    for rows in ids.split(batch):
        result = engine.prefill(rows[:, :-1])
        assert result.trace is not None  # top_k = 1 traces every loop
        b, s = result.ids.shape
        top1 = result.trace.top_ids[:, :, 0].T.tolist()  # (b*S, T)
        settle.append(torch.tensor([settling_loop(t) for t in top1]).view(b, s))
        final.append(result.logits.argmax(-1))  # (b, S)
    return torch.cat(settle), torch.cat(final)


def calibrate(
    exits: Tensor, settle: Tensor, pred: Tensor, full: Tensor, levels: Tensor | None
) -> dict[str, Any]:
    """A rule's exits against the settling loops, over scored positions, each (B, M): the
    shares after / at / before, the wasted work, and how many early exits changed the
    prediction (top-1 ``pred`` against full depth's ``full``); by level (-1: none)."""
    out: dict[str, Any] = calibration(
        zip(exits.flatten().tolist(), settle.flatten().tolist(), strict=True)
    ).as_dict()
    early = exits < settle
    changed = int((early & (pred != full)).sum())
    out |= {
        "before_changed": changed,
        "before_changed_share": changed / out["before"] if out["before"] else 0.0,
    }
    if levels is not None:
        out["by_level"] = [
            {"level": level} | calibrate(exits[sel], settle[sel], pred[sel], full[sel], None)
            for level in range(int(levels.max()) + 1)
            if (sel := levels == level).any()
        ]
    return out


def _summary(run: dict[str, Any], heldout: Heldout, full: Tensor) -> dict[str, Any]:
    """A run's accuracy, top-1 agreement with full depth, exits, work and peak KV."""
    return {
        "accuracy": round(heldout.accuracy(run), 4),
        "agreement": round((run["pred"] == full).float().mean().item(), 4),
        "loss": round(run["loss"], 4),
        "avg_exit": round(run["exit"].float().mean().item(), 3),
        "executed_fraction": round(run["executed_fraction"], 4),
        "peak_kv_bytes": run["peak_kv_bytes"],
    }


def depth_needed(
    loaded: LoadedModel, heldout: Heldout, sweep: Sweep, *, q: float, batch: int = 32
) -> dict[str, Any]:
    """The settling loops and what the exit rules and KV policies make of them (module
    doc). ``q``: the model's default q (its row is marked, as every rule's default)."""
    ids, mask = heldout.ids, heldout.mask
    b = len(ids)
    settle_all, final = settling_loops(loaded, ids, batch)
    settle, full = settle_all[mask].view(b, -1), final[mask].view(b, -1)  # (B, M)
    problems = heldout.problems
    levels = None if problems is None else tasks.position_levels(problems)
    defaults = {f"q={q}", f"kl<{DEFAULTS.kl_threshold:g}", f"eps={DEFAULTS.act_eps}", "seed=0"}
    rows = []
    for rule, setting in rules(sweep, loaded.config.total_ut_steps):
        run = solve(loaded, ids, mask, rule, batch=batch)
        rows.append(
            {"rule": rule.name, "setting": setting, "policy": "best-available"}
            | {"default": setting in defaults}
            | _summary(run, heldout, full)
            | calibrate(run["exit"], settle, run["pred"], full, levels)
        )
    oracle = [
        {"policy": policy}
        | _summary(
            solve(loaded, ids, mask, QExit(1.0), policy=policy, batch=batch, planned=settle_all),
            heldout,
            full,
        )
        for policy in sweep.policies
    ]
    policies = [
        {"setting": f"q={x}", "policy": policy}
        | _summary(solve(loaded, ids, mask, QExit(x), policy=policy, batch=batch), heldout, full)
        for x in sorted({1.0, q}, reverse=True)
        for policy in sweep.policies
    ]
    return {
        "settling": {
            "positions": int(settle.numel()),
            "mean": round(settle.float().mean().item(), 3),
            "histogram": torch.bincount(settle.flatten()).tolist()[1:],  # loops 1..T
        },
        "levels": "hops" if problems and isinstance(problems[0], hops.Problem) else "level",
        "oracle": oracle,
        "calibration": rows,
        "policies": policies,
    }


def default_q(path: Path) -> float:
    """The model's playground default q (``playground.json``), else the run default."""
    page = path / "playground.json"
    stored = json.loads(page.read_text()).get("defaults", {}) if page.exists() else {}
    return float(stored.get("q", DEFAULTS.q))


def write(result: dict[str, Any], json_path: Path) -> Path:
    """The JSON at ``json_path`` and the points as CSV beside it; returns the CSV path."""
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    csv_path = json_path.with_suffix(".csv")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(result["points"])
    return csv_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.offline.frontier", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("path", type=Path, help="a trained model directory")
    parser.add_argument("--json", type=Path, help="default MODEL_DIR/frontier.json")
    parser.add_argument(
        "--size", type=int, help="held-out sequences (default 256; --depth-only: as stored)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="latency measurements")
    parser.add_argument(
        "--depth-only",
        action="store_true",
        help="recompute only the settling loops, oracle, calibration and KV policies",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.path, device="cpu")
    json_path = args.json or args.path / "frontier.json"
    stored = json.loads(json_path.read_text()) if args.depth_only else None
    size = args.size or (stored["sequences"] if stored else 256)
    heldout = heldout_data(args.path, loaded, size)
    result = stored or frontier(loaded, heldout, Sweep(), repeats=args.repeats)
    result |= depth_needed(loaded, heldout, Sweep(), q=default_q(args.path))
    csv_path = write(result, json_path)
    print(f"{len(result['points'])} points -> {csv_path.with_suffix('.json')}, {csv_path}")


if __name__ == "__main__":
    main()
