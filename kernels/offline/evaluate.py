"""Evaluate a trained looped LM on its held-out split; the model card's numbers come from here.

    python -m kernels.offline.evaluate kernels/models/pydoc-loop   # evaluation.json + README.md

The held-out text is rebuilt from the corpus with the split recorded in ``training.json``
(so it needs the same Python version; its digest is checked). Windows of
``length`` tokens are spread evenly over it. Exits are the real engine's: Q-exit with
best-available KV, the skipping prefill of :class:`kernels.engine.Engine` (exactly
DESIGN.md's semantics), next to full depth (q = 1) and the reference per-loop losses.
The output is deterministic: fixed windows, fixed threads, greedy generation.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.engine import Engine
from kernels.generate import generate_stream
from kernels.model import LoopedLM
from kernels.offline import corpus
from kernels.offline.card import write_card
from kernels.offline.evaluate_task import evaluate_task
from kernels.offline.objectives import per_loop_losses
from kernels.request import GenerationParams
from kernels.rules import QExit

QS = (0.5, 0.7, 0.9)
PROMPTS = (
    "def read_file(path):\n",
    'class Queue:\n    """',
    "import os\nimport sys\n\n\n",
    "    for key, value in",
    "Looped transformers",
)


def heldout_ids(path: Path, loaded: LoadedModel) -> tuple[Tensor, str]:
    """The held-out token stream of the run that trained ``path``, and its text's digest.

    Raises ``RuntimeError`` when this interpreter's held-out text is not the one the model
    was evaluated on (another Python version has another standard library).
    """
    recorded = json.loads((path / "training.json").read_text())["corpus"]
    _, heldout = corpus.split(
        corpus.documents(),
        seed=recorded["split_seed"],
        heldout_fraction=recorded["heldout_fraction"],
    )
    digest = corpus.digest(heldout)
    if digest != recorded["heldout_sha256"]:
        raise RuntimeError(
            f"the held-out text of this interpreter (Python {corpus.describe([])['python']}, "
            f"{digest[:12]}) is not the model's (Python {recorded['python']}, "
            f"{recorded['heldout_sha256'][:12]})"
        )
    tokenizer, eos = loaded.tokenizer, loaded.tokenizer.eos_token_id
    if not isinstance(tokenizer, PreTrainedTokenizerBase) or eos is None:
        raise RuntimeError("the held-out text needs the model's trained tokenizer and its EOS")
    return corpus.encode(tokenizer, heldout, eos), digest


def _next_token_loss(logits: Tensor, ids: Tensor) -> Tensor:
    """Per-position loss of (B, S, V) logits predicting ids shifted by one -> (B, S-1)."""
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none"
    ).view(ids.shape[0], -1)


@torch.no_grad()
def exit_run(
    model: LoopedLM, windows: Tensor, q: float, policy: str, batch: int
) -> dict[str, Tensor]:
    """The skipping engine's prefill over all windows: per-position loss and exit loop."""
    engine = Engine(model, QExit(q), policy)
    losses, exits, executed, full = [], [], 0, 0
    for rows in windows.split(batch):
        result = engine.prefill(rows, keep_cache=False)
        losses.append(_next_token_loss(result.logits, rows))
        exits.append(result.exit_loop)
        executed += result.work.token_loops_executed
        full += result.work.token_loops_full
    return {
        "loss": torch.cat(losses),  # (N, S-1)
        "exit": torch.cat(exits),  # (N, S)
        "executed_fraction": torch.tensor(executed / full),
    }


def _exit_stats(run: dict[str, Tensor], full_loss: float, n_loops: int) -> dict[str, Any]:
    exits, loss = run["exit"], run["loss"].mean().item()
    hist = torch.bincount(exits.flatten() - 1, minlength=n_loops).float()
    distinct = torch.tensor([len(row.unique()) for row in exits])
    return {
        "loss": round(loss, 4),
        "loss_rise": round(loss / full_loss - 1, 4),
        "avg_exit": round(exits.float().mean().item(), 4),
        "exit_histogram": [round(v, 4) for v in (hist / hist.sum()).tolist()],
        "executed_fraction": round(run["executed_fraction"].item(), 4),
        "sequences_with_3plus_depths": round((distinct >= 3).float().mean().item(), 4),
    }


def context_examples(
    loaded: LoadedModel, windows: Tensor, exits: Tensor, *, min_count: int = 20, top: int = 8
) -> dict[str, Any]:
    """Token strings that exit at different depths in different contexts, with contexts."""
    decode = loaded.tokenizer.decode
    seen: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for w, (row, row_exits) in enumerate(zip(windows.tolist(), exits.tolist(), strict=True)):
        for pos in range(8, len(row)):  # some context before each occurrence
            seen[row[pos]].append((row_exits[pos], w, pos))
    frequent = {t: v for t, v in seen.items() if len(v) >= min_count}
    varied = {t: v for t, v in frequent.items() if len({e for e, _, _ in v}) >= 2}

    def spread(v: list[tuple[int, int, int]]) -> float:
        return torch.tensor([e for e, _, _ in v]).float().std().item()

    examples = []
    for token in sorted(varied, key=lambda t: (-spread(varied[t]), t))[:top]:
        occurrences = varied[token]
        examples.append(
            {
                "token": decode([token]),
                "count": len(occurrences),
                "depths": dict(sorted(Counter(e for e, _, _ in occurrences).items())),
                "contexts": [
                    {
                        "exit": e,
                        "before": decode(windows[w, max(0, pos - 12) : pos].tolist()),
                        "after": decode(windows[w, pos + 1 : pos + 4].tolist()),
                    }
                    for e, w, pos in (min(occurrences), max(occurrences))
                ],
            }
        )
    return {
        "frequent_tokens": len(frequent),
        "frequent_tokens_with_2plus_depths": len(varied),
        "examples": examples,
    }


def generations(
    loaded: LoadedModel, prompts: Sequence[str], q: float, max_new_tokens: int
) -> list[dict[str, Any]]:
    """Greedy continuations with every position's exit loop (prompt positions included)."""
    out = []
    for prompt in prompts:
        params = GenerationParams(q=q, max_new_tokens=max_new_tokens, top_k=0)
        events = list(generate_stream(loaded, prompt, params))
        out.append(
            {
                "prompt": prompt,
                "text": "".join(e.text for e in events if e.phase == "generated"),
                "tokens": [[e.text, e.exit_loop, e.phase[0]] for e in events],
            }
        )
    return out


def evaluate(
    loaded: LoadedModel,
    ids: Tensor,
    *,
    n_windows: int = 256,
    length: int = 64,
    qs: Sequence[float] = QS,
    batch: int = 32,
    examples: bool = True,
    prompts: Sequence[str] = PROMPTS,
    max_new_tokens: int = 40,
) -> dict[str, Any]:
    """Every number the model card reports, from ``n_windows`` held-out windows.

    Args:
        loaded: the model (its own tokenizer).
        ids: (N,) held-out token stream.
        n_windows, length: how many windows of how many tokens, spread evenly over ids.
        qs: Q-exit thresholds to report (q = 1, full depth, is always measured).
    """
    model, n_loops = loaded.model, loaded.config.total_ut_steps
    windows = corpus.windows(ids, length, n_windows).to(loaded.device)  # (N, S)
    per_loop = torch.cat(
        [
            per_loop_losses(model(rows[:, :-1]).step_logits, rows[:, 1:]).mean(-1)  # (T, b)
            for rows in windows.split(batch)
        ],
        dim=1,
    ).mean(1)  # (T,)
    full = exit_run(model, windows, 1.0, "best-available", batch)
    full_loss = full["loss"].mean().item()
    result: dict[str, Any] = {
        "windows": n_windows,
        "length": length,
        "loss_per_loop": [round(v, 4) for v in per_loop.tolist()],
        "loss_full_depth": round(full_loss, 4),
        "q": {},
    }
    runs = {}
    for q in qs:
        runs[q] = exit_run(model, windows, q, "best-available", batch)
        result["q"][str(q)] = _exit_stats(runs[q], full_loss, n_loops)
        select = exit_run(model, windows, q, "select", batch)["loss"].mean().item()
        result["q"][str(q)]["loss_select_policy"] = round(select, 4)
    if examples and 0.7 in runs:
        result["context"] = context_examples(loaded, windows.cpu(), runs[0.7]["exit"].cpu())
    if prompts:
        result["generations"] = generations(loaded, prompts, 0.7, max_new_tokens)
    result["targets"] = targets(result, n_loops)
    return result


def targets(result: dict[str, Any], n_loops: int) -> dict[str, dict[str, Any]]:
    """The issue's acceptance targets, each with its measured value and whether it is met."""
    losses = result["loss_per_loop"]
    out: dict[str, dict[str, Any]] = {
        "loss falls with every loop": {
            "measured": losses,
            "met": all(a > b for a, b in zip(losses, losses[1:], strict=False)),
        }
    }
    at = result["q"].get("0.7")
    if at:
        out["avg exit depth at q=0.7 <= 0.75 T"] = {
            "measured": at["avg_exit"],
            "bound": 0.75 * n_loops,
            "met": at["avg_exit"] <= 0.75 * n_loops,
        }
        out["loss rise at q=0.7 <= 2%"] = {
            "measured": at["loss_rise"],
            "bound": 0.02,
            "met": at["loss_rise"] <= 0.02,
        }
        out[">= 3 depths in >= 90% of 64-token sequences at q=0.7"] = {
            "measured": at["sequences_with_3plus_depths"],
            "bound": 0.9,
            "met": at["sequences_with_3plus_depths"] >= 0.9,
        }
    if "context" in result:
        out["same token string exits at different depths"] = {
            "measured": result["context"]["frequent_tokens_with_2plus_depths"],
            "met": result["context"]["frequent_tokens_with_2plus_depths"] > 0,
        }
    return out


def evaluate_directory(path: str | Path, threads: int = 1) -> dict[str, Any]:
    """Evaluate a trained directory; writes ``evaluation.json`` (with a small ``check``
    subset that the tests recompute) and returns it."""
    torch.set_num_threads(threads)
    path = Path(path)
    loaded = load_checkpoint(path, device="cpu")
    settings = json.loads((path / "training.json").read_text())["settings"]
    if settings.get("task", "text") != "text":
        q = model_defaults(path).get("q", 1.0)
        task = {"threads": threads, **evaluate_task(loaded, settings, q=q)}
        task["check"] = evaluate_task(loaded, settings, q=q, **TASK_CHECK)
        (path / "evaluation.json").write_text(json.dumps(task, indent=1) + "\n")
        return task
    ids, digest = heldout_ids(path, loaded)
    result = {"heldout_sha256": digest, "threads": threads, **evaluate(loaded, ids)}
    result["check"] = evaluate(loaded, ids, **CHECK)
    (path / "evaluation.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return result


# the part of the evaluation the tests recompute (seconds, not minutes)
CHECK: dict[str, Any] = {"n_windows": 16, "qs": (0.7,), "examples": False, "prompts": ()}
TASK_CHECK: dict[str, Any] = {"per_level": 2, "qs": (), "with_examples": False}


def model_defaults(path: Path) -> dict[str, Any]:
    """The run settings a model directory asks for by default (``playground.json``)."""
    meta = path / "playground.json"
    return json.loads(meta.read_text()).get("defaults", {}) if meta.is_file() else {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kernels.offline.evaluate", description=__doc__)
    parser.add_argument("path", nargs="?", default="kernels/models/pydoc-loop")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    result = evaluate_directory(args.path, args.threads)
    write_card(Path(args.path))
    keys = ("loss_per_loop", "accuracy_fixed_depth", "q", "targets")
    print(json.dumps({k: result[k] for k in keys if k in result}, indent=1))


if __name__ == "__main__":
    main()
