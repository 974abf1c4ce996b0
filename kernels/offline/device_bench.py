"""``python -m kernels.offline.device_bench``: the engine on a real-shape model, one JSON.

What ``benchmarks/device.sh`` runs on a GPU (``--preset ouro-1.4b --dtype bfloat16``), and
on CPU as a dry run (``--device cpu --preset bench-512 --quick``). Random weights of the
preset's shape are made on the device, gates spread as
:func:`kernels.offline.bench.random_model` does. Every figure is a ratio to a baseline
measured in the same run (medians of interleaved repeats, with their spread):

- prefill and decode at batch 1 and through continuous batches of 8 and 32 rows: time
  against full depth at q 0.9 / 0.7 / 0.5 (best-available), and ``kept``, the measured
  saving over the ideal one (1 − executed fraction);
- peak KV against (average compute depth / T) × full depth's;
- continuous depth batching against a dense lockstep batch (a stopped row waits for the
  deepest, computed and dropped), 32 rows with staggered arrivals, in tokens/s;
- host reads per decode step (:mod:`kernels.offline.host_reads`);
- self-speculation (draft depth 1 and 2, k 4, greedy, q 0.7) against plain decoding at
  batch 1 and 8: acceptance rate, tokens per verification, tokens/s ratio, executed
  FLOPs, peak KV, identical outputs (:func:`kernels.offline.bench.run_speculation`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch

from kernels.batch import ContinuousBatch
from kernels.checkpoint import LoadedModel
from kernels.config import DTYPES
from kernels.offline import bench
from kernels.offline.host_reads import count_host_reads
from kernels.request import GenerationParams

QS = (1.0, 0.9, 0.7, 0.5)
FULL = bench.Workload(
    prefill_rows=4,
    prefill_len=512,
    decode_prompt=128,
    decode_new=16,
    decode_prompts=2,
    requests=48,
    batch_prompt=64,
    batch_new=12,
    qs=QS,
    repeats=3,
)
# the dry run: every figure computed once, on a workload a busy CPU runs in a minute
QUICK = bench.Workload(
    prefill_rows=1,
    prefill_len=32,
    decode_prompt=8,
    decode_new=2,
    decode_prompts=1,
    requests=6,
    batch_prompt=8,
    batch_new=2,
    qs=(1.0, 0.7),
    repeats=1,
)
BATCHES = {"full": (8, 32), "quick": (2, 4)}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def kept_ratios(
    loaded: LoadedModel, load: bench.Workload, batches: tuple[int, ...]
) -> list[dict[str, Any]]:
    """Prefill, batch-1 decode and continuous-batch decode against full depth."""
    cases = [bench.Case(q, "best-available") for q in load.qs]
    bench.run_prefill(loaded, cases, load, False)
    bench.run_decode_single(loaded, cases, load, False)
    rows: dict[float, dict[str, Any]] = {case.q: {} for case in cases}
    for b in batches:
        batch_cases = [bench.Case(q, "best-available") for q in load.qs]
        bench.run_decode_batch(loaded, batch_cases, replace(load, batch=b), False)
        base = batch_cases[0]
        for case in batch_cases:
            full, mine = base.times["decode8_tokens_per_s"], case.times["decode8_tokens_per_s"]
            speed = [f / m for f, m in zip(full, mine, strict=True)]  # time ratio per repeat
            ideal = 1 - case.values["decode8_executed_fraction"]
            rows[case.q][f"decode{b}_time_ratio"] = _spread(speed)
            rows[case.q][f"decode{b}_kept"] = (
                (1 - statistics.median(speed)) / ideal if ideal > 0.01 else None
            )
            rows[case.q][f"decode{b}_tokens_per_s"] = _spread(case.times["decode8_tokens_per_s"])
    summary = bench.summarise(cases, loaded.config.total_ut_steps)
    out = []
    for v in summary:
        row = {
            key: v[key]
            for key in (
                "q",
                "avg_compute_depth",
                "prefill_executed_fraction",
                "prefill_time_ratio",
                "prefill_kept",
                "decode1_time_ratio",
                "decode1_kept",
                "prefill_kv_over_depth",
                "decode1_kv_over_depth",
            )
        }
        out.append({**row, **rows[v["q"]]})
    return out


def lockstep_ratio(
    loaded: LoadedModel, rows: int, new: int, prompt: int, repeats: int
) -> dict[str, Any]:
    """Tokens/s of ``rows`` requests arriving one a step, continuous depth batching
    against a dense lockstep batch, at q 0.7."""
    prompts = bench.token_rows(loaded, rows, prompt, 13, False)

    def serve(lockstep: Literal["dense"] | None) -> float:
        params = GenerationParams(max_new_tokens=new, q=0.7, temperature=1.0, seed=3, top_k=0)
        batch = ContinuousBatch(loaded, max_rows=rows, capacity=prompt + new, lockstep=lockstep)
        tokens, step = 0, 0
        bench._sync(loaded.device)
        start = time.perf_counter()
        while step < rows or batch.busy:
            if step < rows:  # staggered arrivals: one request a step
                batch.add(step, prompts[step], params)
            tokens += sum(e.phase == "generated" for u in batch.step().values() for e in u.events)
            step += 1
        bench._sync(loaded.device)
        return tokens / (time.perf_counter() - start)

    piped, dense = [], []
    for _ in range(repeats):
        piped.append(serve(None))
        dense.append(serve("dense"))
    ratios = [p / d for p, d in zip(piped, dense, strict=True)]
    return {
        "rows": rows,
        "continuous_tokens_per_s": _spread(piped),
        "lockstep_dense_tokens_per_s": _spread(dense),
        "ratio": _spread(ratios),
    }


def host_reads_per_step(loaded: LoadedModel, rows: int, new: int, prompt: int) -> dict[str, Any]:
    """Device-to-host reads in each decode half-step of a continuous batch at q 0.7."""
    prompts = bench.token_rows(loaded, rows, prompt, 17, False)
    batch = ContinuousBatch(loaded, max_rows=rows, capacity=prompt + new)
    for key, ids in enumerate(prompts):
        batch.add(key, ids, GenerationParams(max_new_tokens=new, q=0.7, top_k=0))
    counts = []
    while batch.busy:
        for _ in batch.joins():
            pass
        with count_host_reads() as reads:
            batch.decode()
        counts.append(len(reads))
    counts = [c for c in counts if c] or [0]
    return {"rows": rows, **_spread([float(c) for c in counts]), "steps": len(counts)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.offline.device_bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="ouro-1.4b")
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), help="default bfloat16 on CUDA, else float32"
    )
    parser.add_argument("--quick", action="store_true", help="a small workload (dry run)")
    parser.add_argument("--json", type=Path, required=True, help="where the figures go")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    args.dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    if device.type == "cpu":  # as the bench and the workers run: threads only contend
        torch.set_num_threads(1)
    load, batches = (QUICK, BATCHES["quick"]) if args.quick else (FULL, BATCHES["full"])
    wide = batches[-1]
    torch.manual_seed(0)
    started = time.perf_counter()
    loaded = bench.random_model(args.preset, device, DTYPES[args.dtype])
    bench.run_prefill(loaded, [bench.Case(1.0, "best-available")], replace(load, repeats=1), False)
    report = {
        "command": " ".join(["python -m kernels.offline.device_bench", *(argv or sys.argv[1:])]),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "preset": args.preset,
        "dtype": args.dtype,
        "workload": load.__dict__,
        "kept": kept_ratios(loaded, load, batches),
        "continuous_vs_lockstep": lockstep_ratio(
            loaded, wide, load.batch_new, load.batch_prompt, load.repeats
        ),
        "host_reads_per_step": host_reads_per_step(
            loaded, batches[0], load.batch_new, load.batch_prompt
        ),
    }
    report["speculation"] = bench.run_speculation(
        loaded,
        replace(load, batch=batches[0]),
        depths=(1,) if args.quick else (1, 2),
    )
    report["seconds"] = time.perf_counter() - started
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
