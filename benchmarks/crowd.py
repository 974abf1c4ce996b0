"""A crowd on the playground: POST to first generated token while 8 visitors run at once.

    python -m benchmarks.crowd [--visitors 8] [--runs 4] [--tokens 32] [--model DIR]
                               [--server postgres://postgres@127.0.0.1:5432]
                               [--redis redis://127.0.0.1:6379/13]

The full stack as deployed, in subprocesses (``tests/playground/stack.py``): uvicorn and
one Celery worker (``--pool threads``, ``PLAYGROUND_BATCH`` task threads sharing one
continuous batch) on a PostgreSQL database of its own and the given Redis database,
production settings. The model is the shipped ``kernels/models/pydoc-loop`` unless
``--model`` names another. Per-visitor limits are lifted (every visitor here is
127.0.0.1); the batch and its time to a first token are what is measured.

Each of ``--visitors`` visitors submits ``--runs`` runs one after another, each watched on
its event stream to ``done``; every run records the time from sending its POST to its
first generated token event. Baseline in the same run: the same runs from one visitor
alone (each run alone in the batch). Reported: p50 / p95 of both, the crowd's again
without the first wave (every visitor's first run, all submitted at the same instant),
and aggregate generated tokens/s. Goal: p95 at most 500 ms with 8 visitors on the shipped model.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.harness import DEFAULT_SERVER, own_database
from benchmarks.playground import (
    DEFAULT_REDIS,
    MODEL,
    PRODUCTION,
    PROMPT,
    SHIPPED,
    _configure,
    _token_times,
    _watch,
)

PROMPTS = [PROMPT, "import os\n", "class Stack:", "for i in range(", "The list type"]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def _visitor(
    client: httpx.AsyncClient, base: str, number: int, runs: int, tokens: int
) -> list[tuple[float, int, float, float, int]]:
    """One visitor's runs in turn: (POST -> first generated token, generated tokens,
    POST -> first token event (a prompt position: the run was claimed and prefilled),
    POST -> its answer, the run's number in the visitor's turn)."""
    out = []
    async with client:
        for i in range(runs):
            body = {
                "prompt": PROMPTS[(number + i) % len(PROMPTS)],
                "model": MODEL,
                "max_new_tokens": tokens,
                "temperature": 0.0,
            }
            start = time.perf_counter()
            response = await client.post(f"{base}/api/v1/runs/", json=body)
            answered = time.perf_counter() - start
            assert response.status_code == 201, response.text
            seen = await _watch(client, base, response.json()["events_url"], start)
            assert seen and seen[-1][1].get("event") == "done", seen[-1:]
            times = _token_times(seen)
            first, prompt = times["first_generated"], times["first_token"]
            assert first is not None and prompt is not None
            generated = sum(
                e.get("event") == "token" and e["data"]["phase"] == "generated" for _, e in seen
            )
            out.append((first, generated, prompt, answered, i))
    return out


async def _crowd(base: str, visitors: int, runs: int, tokens: int) -> tuple[list, float]:
    # Each visitor's client is made before any clock starts: making one loads an SSL
    # context (about 60 ms of CPU here) and blocks the event loop, which would hold up the
    # requests the other visitors had already timed. Visitors' browsers do not share one.
    clients = [httpx.AsyncClient(timeout=httpx.Timeout(300, connect=30)) for _ in range(visitors)]
    start = time.perf_counter()
    results = await asyncio.gather(
        *(_visitor(clients[v], base, v, runs, tokens) for v in range(visitors))
    )
    return [run for visitor in results for run in visitor], time.perf_counter() - start


def _line(name: str, runs: list[tuple[float, int, float, float, int]], seconds: float) -> str:
    firsts, prompts, answers = (
        [run[0] for run in runs],
        [run[2] for run in runs],
        [run[3] for run in runs],
    )
    tokens = sum(run[1] for run in runs)
    return (
        f"{name}: POST -> first generated token p50 {statistics.median(firsts) * 1e3:4.0f} ms, "
        f"p95 {_p95(firsts) * 1e3:4.0f} ms over {len(runs)} runs (-> first prompt event p50 "
        f"{statistics.median(prompts) * 1e3:.0f} ms, p95 {_p95(prompts) * 1e3:.0f} ms; POST "
        f"answered p50 {statistics.median(answers) * 1e3:.0f} ms, "
        f"p95 {_p95(answers) * 1e3:.0f} ms); "
        f"{tokens / seconds:6.1f} generated tokens/s ({tokens} in {seconds:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED, help="Ouro-format checkpoint")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="Redis URL (a database to use)")
    parser.add_argument("--visitors", type=int, default=8)
    parser.add_argument("--runs", type=int, default=4, help="runs per visitor, one at a time")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per run")
    args = parser.parse_args()
    model = args.model.resolve()
    with own_database(args.server) as url, tempfile.TemporaryDirectory() as workdir:
        _configure(url, args.redis, model)
        from tests.playground.stack import Stack

        stack = Stack(Path(workdir), database_url=url, redis_url=args.redis)
        stack.env.update(
            PRODUCTION
            | {
                "PLAYGROUND_MODELS": f"{MODEL}={model}",
                "PLAYGROUND_TOKEN_DELAY_S": "0",
                "PLAYGROUND_BATCH": str(args.visitors),
                "PLAYGROUND_MAX_QUEUED": str(4 * args.visitors),
                "PLAYGROUND_VISITOR_ACTIVE": str(4 * args.visitors),
                "PLAYGROUND_VISITOR_SUBMITS": "100000/minute",
                "PLAYGROUND_STALE_AFTER_S": "120",
                "PLAYGROUND_STREAM_TTL_S": "60",
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
            }
        )
        stack.start()
        try:
            base = stack.base
            asyncio.run(_crowd(base, 1, 1, 4))  # warm: the worker loads the model once
            alone, alone_s = asyncio.run(_crowd(base, 1, args.runs, args.tokens))
            crowd, crowd_s = asyncio.run(_crowd(base, args.visitors, args.runs, args.tokens))
        finally:
            stack.stop()
    print(
        f"Playground on CPU (load average {os.getloadavg()[0]:.1f} at the end): uvicorn + one "
        f"Celery worker (--pool threads, {args.visitors} rows), PostgreSQL, Redis; "
        f"model {model.name}, {args.tokens} new tokens per run"
    )
    print(_line("one visitor alone  ", alone, alone_s))
    print(_line(f"{args.visitors} visitors at once", crowd, crowd_s))
    # The first wave is every visitor submitting at the same instant; later runs start
    # as each visitor's previous one ends, with the others mid-run.
    later = [run[0] for run in crowd if run[4] > 0]
    if later:
        print(
            f"  of which after each visitor's first run: POST -> first generated token p50 "
            f"{statistics.median(later) * 1e3:4.0f} ms, p95 {_p95(later) * 1e3:4.0f} ms "
            f"over {len(later)} runs"
        )
    ratio = (sum(r[1] for r in crowd) / crowd_s) / (sum(r[1] for r in alone) / alone_s)
    print(f"  aggregate tokens/s, crowd / alone: {ratio:.2f}x (goal: p95 <= 500 ms at once)")


if __name__ == "__main__":
    main()
