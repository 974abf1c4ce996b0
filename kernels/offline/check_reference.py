"""``python -m kernels.offline.check_reference DIR``: our engine against golden reference outputs.

DIR is an Ouro checkpoint directory holding ``reference.safetensors`` in the layout of
``tests/kernels/fixtures/ouro-tiny/README.md`` (outputs of the official implementation).
Prints the max abs error of every tensor and exits non-zero when one is above tolerance:
floats within ``--atol`` (1e-5 for float32), exit steps and greedy ids exactly. Both the
reference forward (every loop) and the skipping engine are checked: ``select`` must give
the threshold outputs, and every KV policy that keeps each loop's K/V at q = 1 full depth
and the greedy ids (``exit-kv`` and ``first-loop-kv`` share one plane across loops, a
different model by design: the naive reference checks those).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor

from kernels import exits
from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.config import DTYPES
from kernels.engine import Engine
from kernels.rules import POLICIES, QExit

DEFAULT_ATOL = {torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 1e-2}


@dataclass
class Row:
    name: str
    error: float
    tolerance: float  # 0 means "exactly equal"

    @property
    def ok(self) -> bool:
        return self.error <= self.tolerance


def _error(got: Tensor, want: Tensor) -> float:
    if got.shape != want.shape:
        return float("inf")
    if not want.is_floating_point():
        return float((got.cpu() != want).sum())  # number of mismatching ids
    return float((got.float().cpu() - want).abs().max())


def greedy_recompute(loaded: LoadedModel, prompt: Tensor, new_tokens: int) -> tuple[Tensor, Tensor]:
    """Greedy full-depth generation by recomputing the whole prefix each step (slow, plain)."""
    ids, step_logits = prompt, []
    for _ in range(new_tokens):
        logits = loaded.model(ids).step_logits[-1, :, -1]  # (B, V)
        step_logits.append(logits)
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids, torch.stack(step_logits, dim=1)


def reference_checks(
    loaded: LoadedModel, ref: dict[str, Tensor]
) -> dict[str, Callable[[], Tensor]]:
    """What the reference forward ("compute every loop") must reproduce, tensor by tensor."""
    device = loaded.device
    ids, mask = ref["input_ids"].to(device), ref["attention_mask"].to(device)
    out = loaded.model(ids, mask, with_layer_outputs=True)
    lam = torch.sigmoid(out.gate_logits.float()).movedim(0, -1)  # (B, S, T)
    pdf = exits.stopping_distribution(lam)
    thresholds = [float(t) for t in ref["thresholds"]]
    steps = torch.stack([exits.q_exit(lam, q) for q in thresholds]) - 1  # (3, B, S) 0-based

    def select(step: Tensor) -> Tensor:  # (B, S) 0-based -> (B, S, V)
        index = step[None, :, :, None].expand(1, *out.step_logits.shape[1:])
        return out.step_logits.gather(0, index).squeeze(0)

    n_new = ref["gen_output_ids"].shape[1] - ref["gen_prompt_ids"].shape[1]
    gen = greedy_recompute(loaded, ref["gen_prompt_ids"].to(device), n_new)
    return {
        "layer_outputs": lambda: out.layer_outputs,
        "step_hidden": lambda: out.step_hidden,
        "step_logits": lambda: out.step_logits,
        "gate_logits": lambda: out.gate_logits,
        "gate_lambda": lambda: lam.movedim(-1, 0),
        "exit_pdf": lambda: pdf.movedim(-1, 0),
        "exit_cdf": lambda: pdf.cumsum(-1).movedim(-1, 0),
        "logits_default": lambda: select(exits.q_exit(lam, 1.0) - 1),
        "logits_weighted": lambda: torch.einsum("bst,tbsv->bsv", pdf, out.step_logits.float()),
        "threshold_exit_steps": lambda: steps,
        "threshold_logits": lambda: torch.stack([select(s) for s in steps]),
        "gen_output_ids": lambda: gen[0],
        "gen_step_logits": lambda: gen[1],
    }


def engine_checks(loaded: LoadedModel, ref: dict[str, Tensor]) -> dict[str, Callable[[], Tensor]]:
    """What the skipping engine must reproduce: the reference's threshold outputs under
    ``select``, and full depth (q = 1) and its greedy generation under every policy that
    keeps each loop's K/V (as the official implementation does)."""
    ids = ref["input_ids"].to(loaded.device)
    thresholds = [float(t) for t in ref["thresholds"]]
    select = [Engine(loaded.model, QExit(q), "select").prefill(ids) for q in thresholds]
    prompt = ref["gen_prompt_ids"].to(loaded.device)
    n_new = ref["gen_output_ids"].shape[1] - prompt.shape[1]
    checks: dict[str, Callable[[], Tensor]] = {
        "engine select threshold_exit_steps": lambda: (
            torch.stack([r.exit_loop for r in select]) - 1
        ),
        "engine select threshold_logits": lambda: torch.stack([r.logits for r in select]),
    }
    for policy in (name for name, kv in POLICIES.items() if kv.loop_stores):
        engine = Engine(loaded.model, QExit(1.0), policy)

        def full(engine: Engine = engine) -> Tensor:
            return engine.prefill(ids).logits

        def greedy(engine: Engine = engine) -> Tensor:
            prefill = engine.prefill(prompt, reserve=n_new)
            new: list[list[int]] = [[] for _ in range(prompt.shape[0])]
            for record in engine.decode(prefill, max_new_tokens=n_new):
                new[record.row].append(record.token_id)
            return torch.cat([prompt.cpu(), torch.tensor(new)], dim=1)

        checks[f"engine {policy} q=1 logits_default"] = full
        checks[f"engine {policy} q=1 gen_output_ids"] = greedy
    return checks


def _golden(name: str) -> str:
    """The reference tensor a check compares with (the last word of its name)."""
    return name.split()[-1]


def check(
    path: str | Path, *, dtype: torch.dtype | None = None, atol: float | None = None
) -> list[Row]:
    """Load DIR and compare every golden tensor; see the module docstring."""
    path = Path(path)
    ref = load_file(str(path / "reference.safetensors"))
    loaded = load_checkpoint(path, dtype=dtype)
    tol = atol if atol is not None else DEFAULT_ATOL[loaded.dtype]
    rows = []
    with torch.no_grad():
        checks = {**reference_checks(loaded, ref), **engine_checks(loaded, ref)}
        for name, compute in checks.items():
            want = ref[_golden(name)]
            rows.append(Row(name, _error(compute(), want), tol if want.is_floating_point() else 0))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.offline.check_reference", description=__doc__
    )
    parser.add_argument("path", help="checkpoint directory with reference.safetensors")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="run in this dtype")
    parser.add_argument("--atol", type=float, help="float tolerance (default by dtype)")
    args = parser.parse_args(argv)
    rows = check(args.path, dtype=DTYPES[args.dtype] if args.dtype else None, atol=args.atol)
    width = max(len(r.name) for r in rows)
    for r in rows:
        kind = f"<= {r.tolerance:.0e}" if r.tolerance else "exact (mismatches)"
        print(f"{r.name:<{width}}  {r.error:.3e}  {kind:<20} {'ok' if r.ok else 'FAIL'}")
    failed = [r.name for r in rows if not r.ok]
    print("all within tolerance" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
