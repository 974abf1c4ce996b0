"""Continuous depth batching in one process: what sharing a decode batch buys.

    python -m benchmarks.serve_batch [--model DIR] [--runs 8] [--new 32] [--random bench-512]
                                     [--repeats 5]

For the shipped model (``kernels/models/pydoc-loop``, or ``--model``) and a random
``bench-512``-shaped checkpoint (``kernels.offline.bench.random_model``, sampled at temperature 1
so its exits spread), all in this process, each measurement with its baseline in the
same run, repeated ``--repeats`` times back to back. Timings on a shared machine are
noisy: read the ratios, each from one repeat, their median, and the ratio of each mode's
best repeat (noise only adds time):

1. **Aggregate generated tokens/s**: ``--runs`` requests added to one
   :class:`kernels.batch.ContinuousBatch` at once, against the same requests one after
   another through :func:`kernels.generate.generate_stream`.
2. **Depth-pipelined against lockstep** at q = 0.7 with ``--runs`` rows: the same batch
   where a row whose token stopped waits for the deepest row. Two lockstep baselines:
   ``dense``, a static batch that computes every row's whole loop (layers, gate, LM
   head, lens) in every step and drops the waiting rows' results (what one batch tensor
   does), and ``compact``, which skips the waiting
   rows (so it does the pipelined batch's row-loops in more, smaller steps). The steps
   each takes are exact; their ratio is the most depth-pipelining can buy when a step's
   cost does not depend on its rows.
3. **Join latency with the batch full of running requests**: from ``add`` to the
   joining request's first generated token, while ``--runs - 1`` others decode (p50 and
   p95 over the joins); the web and broker hops are in ``benchmarks.playground``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path
from typing import Literal

import torch

from kernels.batch import ContinuousBatch, RunUpdate
from kernels.checkpoint import LoadedModel, load_checkpoint
from kernels.generate import generate_stream
from kernels.offline.bench import random_model
from kernels.request import GenerationParams

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


def batched(
    loaded: LoadedModel, work: list, *, lockstep: Literal["dense", "compact"] | None = None
) -> tuple[float, int, int]:
    """All requests added at once; -> (seconds, generated tokens, steps)."""
    batch = ContinuousBatch(loaded, max_rows=len(work), capacity=256, lockstep=lockstep)
    start = time.perf_counter()
    for i, (prompt, params) in enumerate(work):
        batch.add(i, prompt, params)
    tokens = steps = 0
    while batch.busy:
        steps += 1
        for update in batch.step().values():
            tokens += sum(e.phase == "generated" for e in update.events)
    return time.perf_counter() - start, tokens, steps


def one_after_another(loaded: LoadedModel, work: list) -> tuple[float, int]:
    start, tokens = time.perf_counter(), 0
    for prompt, params in work:
        tokens += sum(e.phase == "generated" for e in generate_stream(loaded, prompt, params))
    return time.perf_counter() - start, tokens


def join_latency(loaded: LoadedModel, work: list) -> list[tuple[float, int]]:
    """Each request in turn joins a batch where the others are decoding long runs;
    -> (seconds, steps) from its ``add`` to its first generated token, per join."""
    waits = []
    for joiner in range(len(work)):
        batch = ContinuousBatch(loaded, max_rows=len(work), capacity=256)
        for i, (prompt, params) in enumerate(work):
            if i != joiner:
                params = GenerationParams(**{**vars(params), "max_new_tokens": 200})
                batch.add(i, prompt, params)
        for _ in range(3 * len(work)):  # every other row joined and decoding
            batch.step()
        start, steps = time.perf_counter(), 1
        batch.add("joiner", *work[joiner])
        while not any(
            e.phase == "generated" for e in batch.step().get("joiner", RunUpdate()).events
        ):
            steps += 1
        waits.append((time.perf_counter() - start, steps))
    return waits


def measure(
    name: str, loaded: LoadedModel, runs: int, new: int, temperature: float, repeats: int
) -> None:
    work = requests(runs, new, temperature)
    batched(loaded, work[:2])  # warm-up
    modes: dict[str, Literal["dense", "compact"] | None] = {
        "piped": None,
        "dense": "dense",
        "compact": "compact",
    }
    rates: dict[str, list[float]] = {key: [] for key in ("seq", *modes)}
    steps: dict[str, int] = {}
    order = random.Random(0)
    for _ in range(repeats):  # each repeat in its own order: the machine's speed drifts
        for key in order.sample(list(rates), len(rates)):
            if key == "seq":
                seconds, n = one_after_another(loaded, work)
            else:
                seconds, n, steps[key] = batched(loaded, work, lockstep=modes[key])
            rates[key].append(n / seconds)
    joins = join_latency(loaded, work)
    waits = sorted(seconds for seconds, _ in joins)
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]

    def ratios(a: str, b: str) -> str:
        each = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        listed = ", ".join(f"{r:.2f}" for r in each)
        best = max(rates[a]) / max(rates[b])
        return f"median {statistics.median(each):.2f}x, best-of {best:.2f}x (each repeat: {listed})"

    print(f"\n## {name} ({runs} runs x {new} new tokens, q = 0.7, T = {temperature})")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    print(f"one after another: {statistics.median(rates['seq']):8.1f} tokens/s (median)")
    print(f"batched at once:   {statistics.median(rates['piped']):8.1f} tokens/s (median)")
    print(f"  batched / one after another: {ratios('piped', 'seq')}")
    print(
        f"depth-pipelined:   {statistics.median(rates['piped']):8.1f} tokens/s in "
        f"{steps['piped']} steps; lockstep dense {statistics.median(rates['dense']):.1f}, "
        f"compact {statistics.median(rates['compact']):.1f}, in {steps['dense']} steps "
        f"(ideal {steps['dense'] / steps['piped']:.2f}x)"
    )
    print(f"  depth-pipelined / lockstep dense:    {ratios('piped', 'dense')}")
    print(f"  depth-pipelined / lockstep compact:  {ratios('piped', 'compact')}")
    print(
        f"join to first generated token, {runs - 1} running: "
        f"p50 {statistics.median(waits) * 1e3:.0f} ms, p95 {p95 * 1e3:.0f} ms "
        f"(steps per join: {sorted(steps for _, steps in joins)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=str(Path("kernels/models/pydoc-loop")), help="('' for none)"
    )
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--random", default="bench-512", help="random presets ('' for none)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the workers run (PLAYGROUND_TORCH_THREADS)
    if args.model:
        shipped = load_checkpoint(args.model, device="cpu")
        measure("shipped " + args.model, shipped, args.runs, args.new, 0.0, args.repeats)
    for preset in (p for p in args.random.split(",") if p):
        loaded = random_model(preset, torch.device("cpu"), torch.float32)
        measure(f"random {preset}", loaded, args.runs, args.new, 1.0, args.repeats)


if __name__ == "__main__":
    main()
