"""Continuous depth batching in one process: what sharing a decode batch buys.

    python -m benchmarks.serve_batch [--model DIR] [--runs 8] [--new 32] [--random bench-512]

For the shipped model (``kernels/models/pydoc-loop``, or ``--model``) and a random
``bench-512``-shaped checkpoint (``kernels.offline.bench.random_model``, sampled at temperature 1
so its exits spread), all in this process, each measurement with its baseline in the
same run (timings on a shared machine are noisy; read the ratios):

1. **Aggregate generated tokens/s**: ``--runs`` requests added to one
   :class:`kernels.batch.ContinuousBatch` at once, against the same requests one after
   another through :func:`kernels.stream.generate_stream`.
2. **Depth-pipelined against lockstep** at q = 0.7 with ``--runs`` rows: the same batch
   where a row whose token stopped waits for the deepest row (``lockstep=True``).
3. **Join latency with the batch full of running requests**: from ``add`` to the
   joining request's first generated token, while ``--runs - 1`` others decode (p50 and
   p95 over the joins); the web and broker hops are in ``benchmarks.playground``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from kernels.batch import ContinuousBatch, RunUpdate
from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.offline.bench import random_model
from kernels.stream import GenerationParams, generate_stream

PROMPTS = [
    "def add(a, b):",
    "import os\n",
    "class Stack:",
    "for i in range(",
    "The list type",
    "with open(path) as f:",
    "return self.",
    "while True:",
]


def requests(n: int, new: int, temperature: float) -> list[tuple[str, GenerationParams]]:
    return [
        (
            PROMPTS[i % len(PROMPTS)],
            GenerationParams(max_new_tokens=new, q=0.7, temperature=temperature, seed=i),
        )
        for i in range(n)
    ]


def batched(loaded: LoadedModel, work: list, *, lockstep: bool = False) -> tuple[float, int]:
    """All requests added at once; -> (seconds, generated tokens)."""
    batch = ContinuousBatch(loaded, max_rows=len(work), capacity=256, lockstep=lockstep)
    start = time.perf_counter()
    for i, (prompt, params) in enumerate(work):
        batch.add(i, prompt, params)
    tokens = 0
    while batch.busy:
        for update in batch.step().values():
            tokens += sum(e.phase == "generated" for e in update.events)
    return time.perf_counter() - start, tokens


def one_after_another(loaded: LoadedModel, work: list) -> tuple[float, int]:
    start, tokens = time.perf_counter(), 0
    for prompt, params in work:
        tokens += sum(e.phase == "generated" for e in generate_stream(loaded, prompt, params))
    return time.perf_counter() - start, tokens


def join_latency(loaded: LoadedModel, work: list) -> list[float]:
    """Each request in turn joins a batch where the others are decoding long runs."""
    waits = []
    for joiner in range(len(work)):
        batch = ContinuousBatch(loaded, max_rows=len(work), capacity=256)
        for i, (prompt, params) in enumerate(work):
            if i != joiner:
                params = GenerationParams(**{**vars(params), "max_new_tokens": 200})
                batch.add(i, prompt, params)
        for _ in range(3 * len(work)):  # every other row joined and decoding
            batch.step()
        start = time.perf_counter()
        batch.add("joiner", *work[joiner])
        while not any(
            e.phase == "generated" for e in batch.step().get("joiner", RunUpdate()).events
        ):
            pass
        waits.append(time.perf_counter() - start)
    return waits


def measure(name: str, loaded: LoadedModel, runs: int, new: int, temperature: float) -> None:
    work = requests(runs, new, temperature)
    batched(loaded, work[:2])  # warm-up
    seq_s, seq_n = one_after_another(loaded, work)
    bat_s, bat_n = batched(loaded, work)
    lock_s, lock_n = batched(loaded, work, lockstep=True)
    pipe_s, pipe_n = batched(loaded, work)
    waits = sorted(join_latency(loaded, work))
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]
    print(f"\n## {name} ({runs} runs x {new} new tokens, q = 0.7, T = {temperature})")
    print(f"one after another: {seq_n / seq_s:8.1f} tokens/s ({seq_n} tokens, {seq_s:.2f} s)")
    print(f"batched at once:   {bat_n / bat_s:8.1f} tokens/s ({bat_n} tokens, {bat_s:.2f} s)")
    print(f"  ratio batched / one after another: {(bat_n / bat_s) / (seq_n / seq_s):.2f}x")
    print(f"depth-pipelined:   {pipe_n / pipe_s:8.1f} tokens/s; lockstep {lock_n / lock_s:.1f}")
    print(f"  ratio depth-pipelined / lockstep:   {(pipe_n / pipe_s) / (lock_n / lock_s):.2f}x")
    print(
        f"join to first generated token, {runs - 1} running: "
        f"p50 {statistics.median(waits) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(Path("kernels/models/pydoc-loop")))
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--random", default="bench-512", help="random presets ('' for none)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the workers run (PLAYGROUND_TORCH_THREADS)
    measure(
        "shipped " + args.model, load_checkpoint(args.model, device="cpu"), args.runs, args.new, 0.0
    )
    for preset in (p for p in args.random.split(",") if p):
        loaded = random_model(preset, torch.device("cpu"), torch.float32)
        measure(f"random {preset}", loaded, args.runs, args.new, 1.0)


if __name__ == "__main__":
    main()
