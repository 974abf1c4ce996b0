"""Open event streams against the web process: its threads and the latency of other requests.

    python -m benchmarks.streams [--viewers 200] [--server postgres://postgres@127.0.0.1:5432]
                                 [--redis redis://127.0.0.1:6379/13] [--model DIR]

The full stack as deployed, in subprocesses (``tests/playground/stack.py``): uvicorn
(one process) and one Celery worker, on a PostgreSQL database of its own and the given
Redis database, production settings (DEBUG off). Baseline and load in the same run:

1. **Idle**: the web process's OS threads, and the median of ``GET /api/v1/works/``
   (uncached, ``API_CACHE_SECONDS=0``) over ``--requests`` sequential requests.
2. **With ``--viewers`` open streams** of one run (all from this process, one connection
   each): the same two numbers while every stream is open, the most threads seen while
   they were, and whether every viewer received every position once, in order, then
   ``done``. Goal: at most 10 threads more than idle.

A sync-only middleware in the chain would run each stream on a thread of its own (the
ASGI handler adapts the whole chain with ``sync_to_async``): that is what this measures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness import DEFAULT_SERVER, django_setup, own_database
from benchmarks.playground import DEFAULT_REDIS, MODEL, PRODUCTION, PROMPT, _watch

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "kernels" / "fixtures" / "ouro-tiny"


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class ThreadPeak:
    """The most threads ``pid`` had, sampled every 50 ms while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _threads(self.pid))

    def __enter__(self) -> ThreadPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def _works_latency(base: str, requests: int) -> tuple[float, float]:
    """Median seconds of ``GET /api/v1/works/``, one request after another, each on a new
    connection (a kept-alive one may meet the server's idle timeout)."""
    import httpx

    times = []
    async with httpx.AsyncClient(
        limits=httpx.Limits(max_keepalive_connections=0), timeout=60
    ) as client:
        for _ in range(requests):
            start = time.perf_counter()
            response = await client.get(f"{base}/api/v1/works/")
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, response.status_code
    return statistics.median(times), max(times)


async def _measure(base: str, pid: int, *, viewers: int, requests: int, tokens: int) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=viewers + 8, max_keepalive_connections=viewers + 8)
    timeout = httpx.Timeout(300, connect=30)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        await _works_latency(base, 10)  # warm up
        idle = {"threads": _threads(pid), "works_s": await _works_latency(base, requests)}
        response = await client.post(
            f"{base}/api/v1/runs/",
            json={"prompt": PROMPT, "model": MODEL, "max_new_tokens": tokens},
        )
        assert response.status_code == 201, response.text
        run = response.json()
        start = time.perf_counter()
        with ThreadPeak(pid) as peak:
            watchers = [
                asyncio.ensure_future(_watch(client, base, run["events_url"], start))
                for _ in range(viewers)
            ]
            await asyncio.sleep(2)  # every stream connected and replaying
            loaded = {
                "threads": _threads(pid),
                "works_s": await _works_latency(base, requests),
                "open_at_end": sum(not w.done() for w in watchers),
                "loaded_s": time.perf_counter() - start,
            }
            seen = await asyncio.gather(*watchers)
            loaded["streams_s"] = time.perf_counter() - start
        stored = (await client.get(f"{base}{run['tokens_url']}")).json()
        final = (await client.get(f"{base}{run['api_url']}")).json()
    positions = [token["position"] for token in stored]
    complete = 0
    for events in seen:
        got = [e["data"]["position"] for _, e in events if e.get("event") == "token"]
        complete += got == positions and events[-1][1].get("event") == "done"
    return {
        "idle": idle,
        "loaded": loaded | {"peak_threads": peak.peak},
        "complete": complete,
        "positions": len(positions),
        "ends": Counter(events[-1][1].get("event") if events else None for events in seen),
        "run": f"{final['status']} {final['error']}".strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--requests", type=int, default=50, help="works/ requests per phase")
    parser.add_argument("--tokens", type=int, default=256, help="new tokens of the watched run")
    parser.add_argument("--model", type=Path, default=TINY, help="Ouro-format checkpoint")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="Redis URL (a database to use)")
    args = parser.parse_args()
    model = args.model.resolve()
    with own_database(args.server) as url, tempfile.TemporaryDirectory() as workdir:
        django_setup(url, REDIS_URL=args.redis, PLAYGROUND_MODELS=f"{MODEL}={model}")
        from tests.playground.stack import Stack

        stack = Stack(Path(workdir), database_url=url, redis_url=args.redis)
        stack.env.update(
            PRODUCTION
            | {
                "PLAYGROUND_MODELS": f"{MODEL}={model}",
                "PLAYGROUND_TOKEN_DELAY_S": "0.1",  # the run outlasts the loaded phase
                "PLAYGROUND_VISITOR_STREAMS": str(args.viewers + 10),  # one address here
                "PLAYGROUND_STREAM_TTL_S": "60",
                "PLAYGROUND_STALE_AFTER_S": "120",  # a loaded 2-core machine beats late
                "API_CACHE_SECONDS": "0",
            }
        )
        stack.start()
        assert stack.web is not None
        try:
            result = asyncio.run(
                _measure(
                    stack.base,
                    stack.web.pid,
                    viewers=args.viewers,
                    requests=args.requests,
                    tokens=args.tokens,
                )
            )
        except Exception:
            print(stack.log("web")[-3000:])  # why the server went away
            raise
        finally:
            stack.stop()
    idle, loaded = result["idle"], result["loaded"]
    print(f"Web process (uvicorn, one process) with {args.viewers} open event streams")
    print(
        f"threads: idle {idle['threads']}, with the streams {loaded['threads']} "
        f"(peak {loaded['peak_threads']}): +{loaded['peak_threads'] - idle['threads']} "
        "(goal: at most +10)"
    )
    (idle_p50, idle_max), (loaded_p50, loaded_max) = idle["works_s"], loaded["works_s"]
    print(
        f"works/ median: idle {idle_p50 * 1000:.1f} ms (max {idle_max * 1000:.0f}), with the "
        f"streams {loaded_p50 * 1000:.1f} ms (max {loaded_max * 1000:.0f}), "
        f"{loaded_p50 / idle_p50:.2f}x; "
        f"{loaded['open_at_end']} streams still open after the loaded requests "
        f"({loaded['loaded_s']:.1f} s after the submit; the streams ended at "
        f"{loaded['streams_s']:.1f} s)"
    )
    print(
        f"viewers that received all {result['positions']} positions in order, then done: "
        f"{result['complete']}/{args.viewers} (last events: {dict(result['ends'])}; "
        f"the run: {result['run']})"
    )


if __name__ == "__main__":
    main()
