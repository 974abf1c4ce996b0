"""The playground served for real: POST to first event, serving overhead per token, 20 viewers.

    python -m benchmarks.playground [--model DIR] [--server postgres://postgres@127.0.0.1:5432]
                                    [--redis redis://127.0.0.1:6379/13] [--rounds 5]

The full stack as deployed, in subprocesses (``tests/playground/stack.py``): uvicorn
serving the ASGI app and one warm Celery worker (CPU) on queue ``gpu``, on a PostgreSQL
database of its own (``benchmarks.harness.own_database``) and the given Redis database.
The model is the shipped ``kernels/models/pydoc-loop`` unless ``--model`` names another
Ouro-format directory. Three measurements, each with its baseline in the same run:

1. **POST to first event**: from sending ``POST /api/v1/runs/`` to the first SSE event
   (``run``), to the first token event (the first prompt position, after the broker, the
   worker's claim, prefill, persisting and publishing) and to the first generated token.
   Goal: ≤ 300 ms to the first token event. Baseline: the bare engine's own time to its
   first event for the same prompt, in this process.
2. **Per-token overhead of persisting and streaming**: decode tokens/s of the served run
   (the worker's engine loop, which stores and publishes each token and checks for Stop)
   against the bare ``kernels.generate.generate_stream`` on the same prompt, parameters and
   model in this process, interleaved round by round; also the token interval a viewer
   sees. Goal: ≤ 10 % slower.
3. **20 concurrent viewers of one run**: all connect as the run starts; each must receive
   every position exactly once and in order, then ``done``. Reported: the spread of one
   event's arrival across viewers, and the run's tokens/s against the same run watched by
   one viewer.

Each served run is greedy with ``PLAYGROUND_TOKEN_DELAY_S=0``; times are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import DEFAULT_SERVER, own_database

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "kernels" / "models" / "pydoc-loop"
DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
PROMPT = 'def merge_sorted(left, right):\n    """'
MODEL = "bench"
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": "benchmark-only-" + "x" * 40,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback
    "LOG_LEVEL": "WARNING",
}


def _configure(database_url: str, redis_url: str, model: Path) -> None:
    """This process: production-style settings on the benchmark's database, migrated."""
    os.environ.update(
        PRODUCTION
        | {
            "DJANGO_SETTINGS_MODULE": "loopatlas.settings.base",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "PLAYGROUND_MODELS": f"{MODEL}={model}",
        }
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _stack(workdir: Path, database_url: str, redis_url: str, model: Path, threads: int):
    from tests.playground.stack import Stack

    stack = Stack(workdir, database_url=database_url, redis_url=redis_url)
    stack.env.update(
        PRODUCTION
        | {
            "PLAYGROUND_MODELS": f"{MODEL}={model}",
            "PLAYGROUND_TOKEN_DELAY_S": "0",
            "PLAYGROUND_STALE_AFTER_S": "120",
            "PLAYGROUND_SSE_HEARTBEAT_S": "10",
            "PLAYGROUND_MAX_QUEUED": "64",
            "PLAYGROUND_STREAM_TTL_S": "60",  # the runs' streams go soon after the benchmark
            "OMP_NUM_THREADS": str(threads),  # the worker's torch threads, as the baseline's
            "MKL_NUM_THREADS": str(threads),
        }
    )
    return stack.start()


# A viewer: the SSE stream read with httpx, each event stamped on arrival.


async def _watch(client, base: str, events_url: str, start: float) -> list[tuple[float, dict]]:
    """Every event of one stream until it closes: (seconds since ``start``, event)."""
    seen: list[tuple[float, dict]] = []
    event: dict = {}
    async with client.stream("GET", base + events_url) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if line == "":
                if event:
                    if "data" in event:
                        event["data"] = json.loads(event["data"])
                    seen.append((time.perf_counter() - start, event))
                event = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                event[field] = value[1:] if value.startswith(" ") else value
    return seen


async def _serve(base: str, body: dict, viewers: int) -> tuple[dict, list[list]]:
    """POST a run and watch it with ``viewers`` concurrent streams from the moment it exists."""
    import httpx

    limits = httpx.Limits(max_connections=viewers + 4)
    timeout = httpx.Timeout(120, connect=10)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.perf_counter()
        response = await client.post(f"{base}/api/v1/runs/", json=body)
        assert response.status_code == 201, response.text
        run = response.json()
        streams = [_watch(client, base, run["events_url"], start) for _ in range(viewers)]
        seen = await asyncio.gather(*streams)
        final = (await client.get(f"{base}{run['api_url']}")).json()
    return final, seen


def _token_times(seen: list[tuple[float, dict]]) -> dict[str, float | None]:
    tokens = [(at, e["data"]) for at, e in seen if e.get("event") == "token"]
    generated = [at for at, data in tokens if data["phase"] == "generated"]
    return {
        "first_event": seen[0][0] if seen else None,
        "first_token": tokens[0][0] if tokens else None,
        "first_generated": generated[0] if generated else None,
        "interval": (
            (generated[-1] - generated[0]) / (len(generated) - 1) if len(generated) > 1 else None
        ),
    }


# The bare engine, in this process, on the same checkpoint.


def _bare(loaded, body: dict) -> dict[str, float]:
    from kernels.generate import generate_stream
    from kernels.request import GenerationParams

    params = {k: v for k, v in body.items() if k not in ("prompt", "model", "extrapolate")}
    start, cpu = time.perf_counter(), time.process_time()
    stream = generate_stream(loaded, body["prompt"], GenerationParams(**params))
    first = None
    for _ in stream:
        first = first if first is not None else time.perf_counter() - start
    summary = stream.summary or {}
    return {
        "first_token": first,
        "tokens_per_s": summary["tokens_per_s"],
        "cpu_per_token": (time.process_time() - cpu) / max(summary["generated_tokens"], 1),
    }


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes so far (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def _median(values: list) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def measure(stack, loaded, *, rounds: int, tokens: int, viewers: int) -> list[str]:
    base = stack.base
    short = {"prompt": PROMPT, "model": MODEL, "max_new_tokens": 4, "temperature": 0.0}
    long = short | {"max_new_tokens": tokens}
    asyncio.run(_serve(base, long, 1))  # warm: the worker loads the model once
    _bare(loaded, long)

    first: dict[str, list[float]] = {"first_event": [], "first_token": [], "first_generated": []}
    bare_first: list[float] = []
    for _ in range(rounds * 2):
        _, (seen,) = asyncio.run(_serve(base, short, 1))
        for key, value in _token_times(seen).items():
            if key in first and value is not None:
                first[key].append(value)
        bare_first.append(_bare(loaded, short)["first_token"])

    served_tps, bare_tps, intervals, served_cpu, bare_cpu = [], [], [], [], []
    assert stack.web is not None and stack.worker is not None
    pool = [stack.worker.pid]  # --pool threads: the generations run in the worker process
    for _ in range(rounds):
        before = _cpu_seconds(pool)
        final, (seen,) = asyncio.run(_serve(base, long, 1))
        served_cpu.append((_cpu_seconds(pool) - before) / final["stats"]["generated_tokens"])
        served_tps.append(final["stats"]["tokens_per_s"])
        intervals.append(_token_times(seen)["interval"])
        bare = _bare(loaded, long)
        bare_tps.append(bare["tokens_per_s"])
        bare_cpu.append(bare["cpu_per_token"])

    processes = {"web": [stack.web.pid], "worker": pool}
    cpu_before = {name: _cpu_seconds(pids) for name, pids in processes.items()}
    final, seen_by = asyncio.run(_serve(base, long, viewers))
    cpu = {name: _cpu_seconds(pids) - cpu_before[name] for name, pids in processes.items()}
    stored = len(stack.get(final["tokens_url"]).json())
    complete = 0
    arrivals: dict[int, list[float]] = {}
    for seen in seen_by:
        positions = [int(e["id"]) for _, e in seen if e.get("event") == "token"]
        ended = bool(seen) and seen[-1][1].get("event") == "done"
        complete += positions == list(range(stored)) and ended
        for at, event in seen:
            if event.get("event") == "token":
                arrivals.setdefault(int(event["id"]), []).append(at)
    spreads = sorted(max(times) - min(times) for times in arrivals.values())

    ms = 1000
    bare_interval = 1 / _median(bare_tps)
    lines = [
        f"model {stack.env['PLAYGROUND_MODELS'].split('=', 1)[1]}, prompt {len(PROMPT)} chars, "
        f"greedy, {tokens} new tokens, {rounds} rounds (medians)",
        f"1. POST -> first SSE event (run):      {_median(first['first_event']) * ms:7.1f} ms",
        "   POST -> first token event:          "
        f"{_median(first['first_token']) * ms:7.1f} ms   (goal <= 300 ms; bare engine's own "
        f"first event {_median(bare_first) * ms:.1f} ms)",
        f"   POST -> first generated token:      {_median(first['first_generated']) * ms:7.1f} ms",
        f"2. decode tokens/s, served (worker):   {_median(served_tps):7.1f}   bare engine "
        f"{_median(bare_tps):.1f}   overhead {(_median(bare_tps) / _median(served_tps) - 1):+.1%}"
        " (goal <= +10%)",
        f"   worker CPU per token:              {_median(served_cpu) * ms:7.2f} ms   bare "
        f"{_median(bare_cpu) * ms:.2f} ms   overhead "
        f"{_median(served_cpu) / _median(bare_cpu) - 1:+.1%} (steadier on a shared machine)",
        f"   token interval at the viewer:      {_median(intervals) * ms:7.2f} ms   bare "
        f"{bare_interval * ms:.2f} ms   overhead {_median(intervals) / bare_interval - 1:+.1%}",
        f"3. {viewers} concurrent viewers: {complete}/{viewers} received all {stored} positions "
        f"in order and done; arrival spread across viewers p50 "
        f"{statistics.median(spreads) * ms:.1f} ms, max {spreads[-1] * ms:.1f} ms",
        f"   tokens/s with {viewers} viewers {final['stats']['tokens_per_s']:.1f} vs 1 viewer "
        f"{_median(served_tps):.1f} "
        f"(ratio {final['stats']['tokens_per_s'] / _median(served_tps):.2f}); CPU seconds "
        f"during it: web {cpu['web']:.1f}, worker {cpu['worker']:.1f}",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED, help="Ouro-format checkpoint")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="Redis URL (a database to use)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved repeats")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per long run")
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads, in the worker and the baseline"
    )
    args = parser.parse_args()
    model = args.model.resolve()
    if not (model / "config.json").is_file():
        sys.exit(f"no checkpoint at {model}: train the shipped model or pass --model DIR")
    with own_database(args.server) as url, tempfile.TemporaryDirectory() as workdir:
        _configure(url, args.redis, model)
        import torch

        from kernels.checkpoint import load_checkpoint

        torch.set_num_threads(args.threads)
        loaded = load_checkpoint(model, device="cpu")
        stack = _stack(Path(workdir), url, args.redis, model, args.threads)
        try:
            lines = measure(
                stack, loaded, rounds=args.rounds, tokens=args.tokens, viewers=args.viewers
            )
        finally:
            stack.stop()
    print(
        "Playground served on CPU: uvicorn + one warm Celery worker, PostgreSQL, Redis; "
        f"{args.threads} torch thread(s) in the worker and the baseline"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
