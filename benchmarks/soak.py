"""Soak: mixed traffic against the production-style stack, with Redis restarted and the
worker killed once, reporting 5xx per endpoint, latency, runs and memory.

    python -m benchmarks.soak [--duration 600] [--server postgres://postgres@127.0.0.1:5432]
                              [--model DIR] [--viewers 50] [--users 8]

The stack is the deployed one in subprocesses (``tests/playground/stack.py``): uvicorn
serving the ASGI app and one Celery worker on queue ``gpu``, with DEBUG off, on a
PostgreSQL database of its own (``benchmarks.harness``) and a Redis server of its own
(started here on a free port, as compose runs it: no persistence, ``maxmemory`` with
``volatile-lru``). A second process on loopback sends the traffic:

- ``--users`` loops of API reads (works, a work, facets, timeline), exports (CSV,
  BibTeX, RIS, JSON), Explore pages (filtered, a work, Compare) and suggestions;
- a playground run submitted every ``--run-every`` seconds (the tiny fixture model
  unless ``--model``), and ``--viewers`` stream viewers, each watching the newest run to
  its end, again and again.

Faults: at a third of the duration the Redis server is killed (SIGKILL) and started
again on the same port; at two thirds the worker process (a ``--pool threads`` worker:
one process, which runs the generations in its threads) is killed (SIGKILL) and a new
worker started, as a supervisor would. After the traffic the script waits for every
submitted run to end and reports: requests, 4xx and 5xx (and connection errors) per
endpoint, p50/p99 latency, runs by final status (none may stay queued or running), and
the resident memory of the web and worker processes after warm-up and at the end.

Throttles are raised for the soak (one address sends everything); the 429s that remain
are reported as 4xx. Numbers from a shared machine are noisy: compare them with each
other within a run (p99 against p50, end memory against start), not across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import DEFAULT_SERVER, django_setup, own_database

if TYPE_CHECKING:
    from tests.playground.stack import Stack

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "kernels" / "fixtures" / "ouro-tiny"
PROMPT = "def add(a, b):"
EXPORT_FORMATS = ("csv", "bibtex", "ris", "json")
SOAK_ENV = {
    "THROTTLE_SUGGESTIONS": "100000/hour",  # one address sends all the traffic
    "THROTTLE_EXPORTS": "100000/minute",
    "PLAYGROUND_MAX_QUEUED": "64",
    "PLAYGROUND_QUEUED_TIMEOUT_S": "60",  # a run the killed Redis took with it ends too
    "PLAYGROUND_STREAM_TTL_S": "120",
    "PLAYGROUND_VISITOR_STREAMS": "100",  # its 50 viewers share one address
}


# -- the services this script owns ----------------------------------------------------


class RedisServer:
    """A redis-server of the soak's own on a free port (never the shared one)."""

    def __init__(self, workdir: Path) -> None:
        with socket.socket() as sock:  # a free port (Django is not set up yet)
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--maxmemory",
                "256mb",
                "--maxmemory-policy",
                "volatile-lru",
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while (
            subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, check=False
            ).stdout.strip()
            != b"PONG"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the soak's redis-server did not start")
            time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def rss_mib(pids: list[int]) -> float:
    """Resident memory of the processes together (MiB), from /proc."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue
        total += next(  # an exited process not yet reaped has none
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")),
            0,
        )
    return total / 1024


# -- the traffic (the second process) ---------------------------------------------------


@dataclass
class Tally:
    """What the load process saw, sent back to the main process as plain data."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    runs: list[str] = field(default_factory=list)
    streams: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def record(self, endpoint: str, status: int | str, seconds: float) -> None:
        kind = status if isinstance(status, str) else f"{status // 100}xx"
        self.statuses[endpoint][kind] += 1
        self.latencies[endpoint].append(seconds)

    def plain(self) -> dict[str, Any]:
        return {
            "latencies": dict(self.latencies),
            "statuses": {name: dict(kinds) for name, kinds in self.statuses.items()},
            "runs": self.runs,
            "streams": dict(self.streams),
        }


async def _request(
    client: Any, tally: Tally, endpoint: str, method: str, url: str, **kw: Any
) -> Any:
    import httpx

    start = time.perf_counter()
    try:
        response = await client.request(method, url, **kw)
    except httpx.HTTPError as exc:
        tally.record(endpoint, type(exc).__name__, time.perf_counter() - start)
        return None
    tally.record(endpoint, response.status_code, time.perf_counter() - start)
    return response


async def _user(client: Any, tally: Tally, slugs: list[str], until: float, seed: int) -> None:
    """One visitor's loop over the atlas: API reads, exports, pages, a suggestion."""
    rng = random.Random(seed)
    families = ["universal", "looped-lm", "prelude-core-coda", "token-routed"]
    while time.monotonic() < until:
        slug, other = rng.sample(slugs, 2)
        choice = rng.random()
        if choice < 0.30:
            endpoint, url = rng.choice(
                [
                    ("api:works", f"/api/v1/works/?page={rng.randint(1, 4)}"),
                    ("api:work", f"/api/v1/works/{slug}/"),
                    ("api:facets", f"/api/v1/facets/?recurrence_family={rng.choice(families)}"),
                    ("api:timeline", "/api/v1/timeline/"),
                ]
            )
            await _request(client, tally, endpoint, "GET", url)
        elif choice < 0.45:
            fmt = rng.choice(EXPORT_FORMATS)
            url = f"/api/v1/export/?format={fmt}&recurrence_family={rng.choice(families)}"
            await _request(client, tally, f"export:{fmt}", "GET", url)
        elif choice < 0.90:
            endpoint, url = rng.choice(
                [
                    ("page:explore", f"/?recurrence_family={rng.choice(families)}"),
                    ("page:explore", "/"),
                    ("page:work", f"/works/{slug}/"),
                    ("page:compare", f"/compare/?works={slug},{other}"),
                ]
            )
            await _request(client, tally, endpoint, "GET", url)
        else:
            body = {
                "work": slug,
                "field": "venue",
                "proposed_value": f"Soak {rng.randint(0, 10**6)}",
                "rationale": "Soak traffic.",
            }
            await _request(
                client, tally, "api:suggestion", "POST", "/api/v1/suggestions/", json=body
            )
        await asyncio.sleep(rng.uniform(0.05, 0.25))


async def _submitter(
    client: Any, tally: Tally, model: str, until: float, every: float, newest: list[dict[str, Any]]
) -> None:
    """A playground run every ``every`` seconds; ``newest`` keeps the latest for viewers."""
    n = 0
    while time.monotonic() < until:
        body = {"prompt": f"{PROMPT} # {n}", "model": model, "max_new_tokens": 24, "seed": n}
        response = await _request(client, tally, "run:submit", "POST", "/api/v1/runs/", json=body)
        if response is not None and response.status_code == 201:
            run = response.json()
            tally.runs.append(run["id"])
            newest[:] = [run]
        n += 1
        await asyncio.sleep(every)


async def _viewer(client: Any, tally: Tally, until: float, newest: list[dict[str, Any]]) -> None:
    """Watch the newest run's stream to its end (``done`` or ``error``), again and again."""
    import httpx

    while time.monotonic() < until:
        if not newest:
            await asyncio.sleep(0.5)
            continue
        run, last, start = newest[0], "", time.perf_counter()
        try:
            async with client.stream("GET", run["events_url"]) as response:
                tally.record("run:stream", response.status_code, time.perf_counter() - start)
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        last = line.partition(":")[2].strip()
        except httpx.HTTPError as exc:
            tally.record("run:stream", type(exc).__name__, time.perf_counter() - start)
            await asyncio.sleep(0.5)
            continue
        tally.streams[last if last in ("done", "error") else "closed early"] += 1
        await asyncio.sleep(0.2)


async def _traffic(args: dict[str, Any]) -> dict[str, Any]:
    import httpx

    tally = Tally()
    newest: list[dict[str, Any]] = []  # the latest run, shared by the viewers
    until = time.monotonic() + args["duration"]
    limits = httpx.Limits(max_connections=args["viewers"] + args["users"] + 8)
    timeout = httpx.Timeout(60, connect=10, read=60)
    async with httpx.AsyncClient(base_url=args["base"], limits=limits, timeout=timeout) as client:
        await asyncio.gather(
            *(_user(client, tally, args["slugs"], until, seed) for seed in range(args["users"])),
            _submitter(client, tally, args["model"], until, args["run_every"], newest),
            *(_viewer(client, tally, until, newest) for _ in range(args["viewers"])),
        )
    return tally.plain()


def _load_process(args: dict[str, Any], results: Any) -> None:
    """The second process: all the traffic, its tally put on ``results`` at the end."""
    results.put(asyncio.run(_traffic(args)))


# -- the run ----------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _wait_for_runs(ids: list[str], seconds: float) -> dict[str, int]:
    """Final statuses of the submitted runs, after waiting for the unfinished to end."""
    from playground.models import Run
    from playground.services import run_fail_stale

    deadline = time.monotonic() + seconds
    unfinished = [Run.Status.QUEUED, Run.Status.RUNNING]
    while Run.objects.filter(pk__in=ids, status__in=unfinished).exists():
        if time.monotonic() > deadline:
            break
        run_fail_stale()  # what the next viewer, submit or worker start would do
        time.sleep(2)
    counts: dict[str, int] = defaultdict(int)
    for status in Run.objects.filter(pk__in=ids).values_list("status", flat=True):
        counts[status] += 1
    counts["missing from the database"] = len(ids) - sum(counts.values())
    for error in Run.objects.filter(pk__in=ids, status=Run.Status.FAILED).values_list(
        "error", flat=True
    ):
        print(f"failed run: {error}")
    return dict(counts)


def _report(
    tally: dict[str, Any], runs: dict[str, int], memory: dict[str, list[float]]
) -> list[str]:
    lines = [
        f"{'endpoint':<16} {'requests':>8} {'2xx':>6} {'4xx':>5} {'5xx':>5} {'errors':>6}"
        f" {'p50 ms':>8} {'p99 ms':>8}"
    ]
    everything: list[float] = []
    for endpoint in sorted(tally["statuses"]):
        kinds, seconds = tally["statuses"][endpoint], tally["latencies"][endpoint]
        everything += seconds
        errors = sum(n for kind, n in kinds.items() if not kind.endswith("xx"))
        lines.append(
            f"{endpoint:<16} {len(seconds):>8} {kinds.get('2xx', 0):>6} {kinds.get('4xx', 0):>5}"
            f" {kinds.get('5xx', 0):>5} {errors:>6} {_percentile(seconds, 0.5) * 1000:>8.1f}"
            f" {_percentile(seconds, 0.99) * 1000:>8.1f}"
        )
    lines.append(
        f"{'all':<16} {len(everything):>8}   p50 {_percentile(everything, 0.5) * 1000:.1f} ms,"
        f" p99 {_percentile(everything, 0.99) * 1000:.1f} ms (streams: time to headers)"
    )
    failures = {
        endpoint: {kind: n for kind, n in kinds.items() if not kind.endswith("xx")}
        for endpoint, kinds in tally["statuses"].items()
    }
    lines.append(f"connection errors: {json.dumps({k: v for k, v in failures.items() if v})}")
    lines.append(f"streams watched to their end: {json.dumps(tally['streams'], sort_keys=True)}")
    lines.append(
        f"runs submitted {len(tally['runs'])}; final statuses {json.dumps(runs, sort_keys=True)}"
    )
    for name, (start, *rest) in memory.items():
        end = rest[-1]
        lines.append(
            f"memory {name}: {start:.0f} MiB after warm-up -> {end:.0f} MiB at the end "
            f"({end / start - 1:+.1%})"
            + (f"; {rest[0]:.0f} MiB before the kill" if len(rest) > 1 else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of traffic")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--model", type=Path, default=TINY, help="Ouro-format checkpoint")
    parser.add_argument("--users", type=int, default=8, help="concurrent atlas visitors")
    parser.add_argument("--viewers", type=int, default=50, help="concurrent stream viewers")
    parser.add_argument("--run-every", type=float, default=3.0, help="seconds between runs")
    args = parser.parse_args()
    with own_database(args.server) as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        redis = RedisServer(workdir)
        redis.start()
        model = f"soak={args.model.resolve()}"
        env = SOAK_ENV | {"REDIS_URL": redis.url, "PLAYGROUND_MODELS": model}
        django_setup(url, **env)
        from atlas.models import Work
        from benchmarks.playground import PRODUCTION
        from tests.playground.stack import Stack  # noqa: F811 (the class, now at run time)

        slugs = list(Work.objects.values_list("slug", flat=True))
        stack = Stack(workdir, database_url=url, redis_url=redis.url)
        stack.env.update(PRODUCTION | env)
        stack.start()
        try:
            lines = _soak(args, stack, redis, slugs)
        finally:
            stack.stop()
            redis.kill()
    print(
        f"Soak: {args.duration:.0f} s of mixed traffic ({args.users} visitors, a run every "
        f"{args.run_every:.0f} s, {args.viewers} stream viewers) against uvicorn + one Celery "
        "worker (CPU), PostgreSQL, Redis; Redis killed and restarted at 1/3, the worker "
        "killed and restarted at 2/3"
    )
    print("\n".join(lines))


def _soak(
    args: argparse.Namespace, stack: Stack, redis: RedisServer, slugs: list[str]
) -> list[str]:
    """Traffic from a second process while this one injects the faults and samples memory."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    load = {
        "base": stack.base,
        "duration": args.duration,
        "slugs": slugs,
        "users": args.users,
        "viewers": args.viewers,
        "model": "soak",
        "run_every": args.run_every,
    }
    process = context.Process(target=_load_process, args=(load, results))
    started = time.monotonic()
    process.start()

    def at(fraction: float) -> None:
        time.sleep(max(0.0, started + fraction * args.duration - time.monotonic()))

    def worker_pid() -> int:
        assert stack.worker is not None
        return stack.worker.pid  # one process: the pool is threads

    def web_pid() -> int:
        assert stack.web is not None
        return stack.web.pid

    at(0.1)  # warmed up: the model loaded, the caches filled
    memory = {"web": [rss_mib([web_pid()])], "worker": [rss_mib([worker_pid()])]}
    at(1 / 3)
    redis.kill()
    redis.start()
    at(2 / 3)
    memory["worker"].append(rss_mib([worker_pid()]))
    stack.kill_worker()  # SIGKILL: the worker process itself, no handler, no cleanup
    stack.start_worker()
    tally = results.get(timeout=args.duration + 300)
    process.join(timeout=60)
    memory["web"].append(rss_mib([web_pid()]))
    memory["worker"].append(rss_mib([worker_pid()]))
    runs = _wait_for_runs(tally["runs"], seconds=120)
    return _report(tally, runs, memory)


if __name__ == "__main__":
    main()
