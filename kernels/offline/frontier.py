"""``python -m kernels.offline.frontier MODEL_DIR``: the depth-accuracy frontier of a model.

Sweeps held-out data over every exit rule (Q-exit over a range of q, convergence over a
range of KL thresholds, fixed k for every k, PonderNet sampled halting, ACT over a range
of eps) and every KV policy. Each point records together: accuracy (exact match for a
task model; next-token top-1 and loss for a text model), the average exit loop, the
executed fraction of full-depth token-loops, per-token latency (median over batches of
the skipping prefill's seconds per token, and its ratio to full depth measured in the
same run) and peak KV bytes. Written to ``MODEL_DIR/frontier.json`` and ``frontier.csv``
(``--json PATH`` puts the JSON there, the CSV beside it); the playground's Frontier view
only reads them.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.offline import addition, corpus
from kernels.offline.evaluate import heldout_ids
from kernels.offline.evaluate_task import EVAL_SEED, solve
from kernels.rules import ACT, POLICIES, Convergence, ExitRule, Fixed, Ponder, QExit

QS = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
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
    "peak_kv_bytes",
)


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


def heldout_data(path: Path, loaded: LoadedModel, size: int) -> tuple[Tensor, Tensor, str]:
    """Held-out sequences (B, S+1), their scored positions (B, S), and what accuracy means."""
    settings = json.loads((path / "training.json").read_text())["settings"]
    if settings.get("task", "text") == "addition":
        chains = range(settings["max_chain"] + 1)
        problems = addition.problems(EVAL_SEED, size, settings["digits"], chains)
        ids, mask = addition.encode(problems)
        return ids, mask, "exact match"
    ids, _ = heldout_ids(path, loaded)
    windows = corpus.windows(ids, 65, size)  # (N, 65)
    return windows, torch.ones(size, 64, dtype=torch.bool), "next-token top-1"


def frontier(
    loaded: LoadedModel, ids: Tensor, mask: Tensor, metric: str, sweep: Sweep, batch: int = 32
) -> dict[str, Any]:
    """Every point of the sweep. Full depth (best-available) is the latency baseline,
    measured before and after the sweep (their mean), after one warm-up batch."""
    n_loops = loaded.config.total_ut_steps
    points = []
    solve(loaded, ids[:batch], mask[:batch], QExit(1.0), batch=batch)  # warm-up

    def full_depth_s() -> float:
        return statistics.median(solve(loaded, ids, mask, QExit(1.0), batch=batch)["per_token_s"])

    before = full_depth_s()
    for policy in sweep.policies:
        for rule, setting in rules(sweep, n_loops):
            run = solve(loaded, ids, mask, rule, policy=policy, batch=batch)
            exact = run["solved"].float().mean().item()
            median_s = statistics.median(run["per_token_s"])
            points.append(
                {
                    "rule": rule.name,
                    "setting": setting,
                    "policy": policy,
                    "accuracy": round(exact if metric == "exact match" else run["top1"], 4),
                    "loss": round(run["loss"], 4),
                    "avg_exit": round(run["exit"].float().mean().item(), 3),
                    "executed_fraction": round(run["executed_fraction"], 4),
                    "latency_ms_per_token": round(1000 * median_s, 4),
                    "latency_s": median_s,
                    "peak_kv_bytes": run["peak_kv_bytes"],
                }
            )
    base_s = (before + full_depth_s()) / 2
    for point in points:
        point["latency_ratio"] = round(point.pop("latency_s") / base_s, 3)
    return {
        "metric": metric,
        "sequences": len(ids),
        "scored_positions": int(mask.sum()),
        "loops": n_loops,
        "threads": torch.get_num_threads(),
        "latency": "median over batches of the skipping prefill's seconds per scored token; "
        "ratio to full depth (q=1, best-available) measured before and after the sweep",
        "points": points,
    }


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
    parser.add_argument("--size", type=int, default=256, help="held-out sequences")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.path, device="cpu")
    ids, mask, metric = heldout_data(args.path, loaded, args.size)
    result = frontier(loaded, ids, mask, metric, Sweep())
    csv_path = write(result, args.json or args.path / "frontier.json")
    print(f"{len(result['points'])} points -> {csv_path.with_suffix('.json')}, {csv_path}")


if __name__ == "__main__":
    main()
