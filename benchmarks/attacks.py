"""Attacks: what a few deliberate visitors can do to the production-style stack, counted.

    python -m benchmarks.attacks [--server postgres://postgres@127.0.0.1:5432] [--streams 300]

The stack is the soak's (``benchmarks.soak``): uvicorn serving the ASGI app and one Celery
worker on PostgreSQL and a Redis server of this script's own, DEBUG off, every limit at its
default. Each visitor sends from its own loopback address (127.0.x.y), so per-address limits
see as many visitors as the attack uses; every burst is released together once all its
clients are connected. It prints one line per attack, then one JSON document:

- ``one_address``: 20 submits at once from one address; runs created, and active at once
  (the per-visitor limit is 2);
- ``many_addresses``: 50 addresses submit at once; runs active at once (the site cap is 8);
- ``fresh_cookies``: 12 page submits from one address, each with a fresh session; active;
- ``rates``: a burst against each per-address rate (submits 12/minute, suggestions 10/hour,
  exports 120/minute, admin sign-in 10/hour); how many were let through (not 429);
- ``stream_cap``: ``--streams`` opens at once from one address on one quiet run (cap 20);
- ``idle_streams``: ``--streams`` quiet streams from ``--streams``/20 addresses; ``works/``
  latency beside them against before them, the web process's CPU and the database's
  transactions per second while they are open;
- ``poison``: three ordinary runs and one with ``temperature`` 1e-300, submitted together;
  the final status of each;
- ``replays``: 100 viewers replay a finished 256-token run at once; the web process's
  resident memory before and after.

Nothing here is a pass/fail test (the test suite holds those); it is the before/after record
of the hardening, compared within one run of the script where it matters (latency beside
streams against before them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import DEFAULT_SERVER, django_setup, own_database
from benchmarks.soak import TINY, RedisServer, rss_mib

if TYPE_CHECKING:
    import httpx

    from tests.playground.stack import Stack

PROMPT = "def add(a, b):"
POISON = {"prompt": "x", "temperature": 1e-300}
DEFAULTS = {  # what Stack sets for the tests, back to the site's defaults
    "PLAYGROUND_VISITOR_SUBMITS": "12/minute",
    "PLAYGROUND_VISITOR_ACTIVE": "2",
    "PLAYGROUND_TOKEN_DELAY_S": "0",
    # plain HTTP on loopback: the page's cookies must come back for its form to submit
    "SESSION_COOKIE_SECURE": "0",
    "CSRF_COOKIE_SECURE": "0",
}


def _client(base: str, host: int, **kwargs: Any) -> httpx.AsyncClient:
    """A visitor on its own loopback address ``127.0.<host // 250>.<host % 250 + 2>``."""
    import httpx

    address = f"127.0.{host // 250}.{host % 250 + 2}"
    transport = httpx.AsyncHTTPTransport(local_address=address)
    timeout = httpx.Timeout(60, connect=10)
    return httpx.AsyncClient(base_url=base, transport=transport, timeout=timeout, **kwargs)


async def _together(calls: list[Any]) -> list[Any]:
    """Run the coroutine factories at once, after each has connected (a barrier)."""
    return await asyncio.gather(*(call() for call in calls), return_exceptions=True)


def _status(response: Any) -> int | str:
    return response.status_code if hasattr(response, "status_code") else type(response).__name__


def _active() -> int:
    from playground.models import Run

    return Run.objects.filter(status__in=Run.ACTIVE).count()


def _clear_runs() -> None:
    """End every active run, so the next attack starts with free slots."""
    from playground.models import Run

    Run.objects.filter(status__in=Run.ACTIVE).update(status=Run.Status.CANCELLED)


async def _warm(clients: list[httpx.AsyncClient], path: str = "/api/v1/") -> None:
    """Connect every client (the barrier: the burst starts once all are connected)."""
    await asyncio.gather(*(client.get(path) for client in clients))


async def _submits(base: str, hosts: list[int], body: dict[str, Any]) -> list[int | str]:
    clients = [_client(base, host) for host in hosts]
    await _warm(clients)
    responses = await _together([lambda c=c: c.post("/api/v1/runs/", json=body) for c in clients])
    for client in clients:
        await client.aclose()
    return [_status(r) for r in responses]


class _FormFields(HTMLParser):
    """The first form's fields as a browser would submit them untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self.select: str | None = None
        self.forms = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {key: value or "" for key, value in attrs}
        self.forms += tag == "form"
        if tag == "option" and self.select and (self.select not in self.fields or "selected" in a):
            self.fields[self.select] = a.get("value", "")
        if self.forms != 1 or "name" not in a:
            return
        if tag == "input" and (a.get("type") != "checkbox" or "checked" in a):
            self.fields[a["name"]] = a.get("value", "")
        elif tag == "select":
            self.select = a["name"]
        elif tag == "textarea":
            self.fields[a["name"]] = ""

    def handle_endtag(self, tag: str) -> None:
        self.select = None if tag == "select" else self.select


async def _page_submits(base: str, host: int, count: int) -> list[int]:
    """``count`` page-form submits from one address, each from a fresh session."""
    statuses = []
    for _ in range(count):
        async with _client(base, host) as client:
            page = await client.get("/playground/")
            form = _FormFields()
            form.feed(page.text)
            data = form.fields | {"prompt": PROMPT}
            response = await client.post(
                "/playground/", data=data, headers={"Referer": f"{base}/playground/"}
            )
            statuses.append(response.status_code)
    return statuses


async def _burst(base: str, host: int, count: int, send: Any) -> int:
    """How many of ``count`` simultaneous requests from one address were not 429."""
    import httpx

    client = _client(base, host, limits=httpx.Limits(max_connections=count))
    await asyncio.gather(*(client.get("/api/v1/") for _ in range(min(count, 20))))
    responses = await _together([lambda: send(client) for _ in range(count)])
    await client.aclose()
    return sum(1 for r in responses if _status(r) != 429)


async def _admin_burst(base: str, host: int, count: int) -> int:
    client = _client(base, host)
    form = _FormFields()
    form.feed((await client.get("/admin/login/")).text)
    data = form.fields | {"username": "admin", "password": "wrong"}
    headers = {"Referer": f"{base}/admin/login/"}
    responses = await _together(
        [lambda: client.post("/admin/login/", data=data, headers=headers) for _ in range(count)]
    )
    await client.aclose()
    return sum(1 for r in responses if _status(r) != 429)


async def _rates(base: str) -> dict[str, str]:
    blank = {"prompt": " "}  # refused by validation (400) once past the throttle
    suggestion = {"work": "no-such-work", "field": "venue", "proposed_value": "x"}
    passed = {
        "submits (12/minute)": await _burst(
            base, 20, 25, lambda c: c.post("/api/v1/runs/", json=blank)
        ),
        "suggestions (10/hour)": await _burst(
            base, 21, 25, lambda c: c.post("/api/v1/suggestions/", json=suggestion)
        ),
        "exports (120/minute)": await _burst(
            base, 22, 150, lambda c: c.get("/api/v1/export/?format=csv")
        ),
        "admin sign-in (10/hour)": await _admin_burst(base, 23, 20),
    }
    return {name: str(n) for name, n in passed.items()}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks of 1/100 s


def _transactions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [connection.settings_dict["NAME"]],
        )
        return int(cursor.fetchone()[0])


async def _latency(base: str, host: int, count: int = 20) -> list[float]:
    """Milliseconds of ``count`` sequential uncached ``works/`` reads."""
    samples = []
    async with _client(base, host) as client:
        for i in range(count):
            start = time.perf_counter()
            await client.get(f"/api/v1/works/?page=1&_={i}")
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def _open_streams(
    base: str, url: str, hosts: list[int], per_host: int
) -> tuple[list[int | str], list[Any], list[httpx.AsyncClient]]:
    """Open ``per_host`` streams from each host at once; return statuses and the open ones."""
    import httpx

    clients = [
        _client(base, host, limits=httpx.Limits(max_connections=per_host + 2)) for host in hosts
    ]
    await _warm(clients, "/api/v1/runs/models/")

    async def one(client: httpx.AsyncClient) -> Any:
        request = client.build_request("GET", url, headers={"Accept": "text/event-stream"})
        return await client.send(request, stream=True)

    responses = await _together([lambda c=c: one(c) for c in clients for _ in range(per_host)])
    return [_status(r) for r in responses], responses, clients


async def _close(responses: list[Any], clients: list[httpx.AsyncClient]) -> None:
    for response in responses:
        if hasattr(response, "aclose"):
            await response.aclose()
    for client in clients:
        await client.aclose()


async def _streams(stack: Stack, streams: int) -> dict[str, Any]:
    base = stack.base
    async with _client(base, 30) as client:
        run = (await client.post("/api/v1/runs/", json={"prompt": PROMPT})).json()
    statuses, responses, clients = await _open_streams(base, run["events_url"], [31], streams)
    cap = {"opened": sum(1 for s in statuses if s == 200), "of": streams}
    await _close(responses, clients)
    await asyncio.sleep(2)

    before = await _latency(base, 40)
    assert stack.web is not None
    hosts = list(range(50, 50 + max(1, streams // 20)))
    statuses, responses, clients = await _open_streams(base, run["events_url"], hosts, 20)
    await asyncio.sleep(12)  # past the Redis client's socket timeout: a quiet run stays quiet
    cpu, xacts, start = _cpu_seconds(stack.web.pid), _transactions(), time.monotonic()
    beside = await _latency(base, 41)
    await asyncio.sleep(max(0.0, 10 - (time.monotonic() - start)))
    elapsed = time.monotonic() - start
    idle = {
        "open": sum(1 for s in statuses if s == 200),
        "works_p50_ms_before": round(statistics.median(before), 1),
        "works_p50_ms_beside": round(statistics.median(beside), 1),
        "web_cpu_percent": round(100 * (_cpu_seconds(stack.web.pid) - cpu) / elapsed, 1),
        "db_transactions_per_s": round((_transactions() - xacts) / elapsed, 1),
    }
    await _close(responses, clients)
    return {"stream_cap": cap, "idle_streams": idle}


async def _poison(base: str) -> dict[str, Any]:
    bodies = [{"prompt": f"{PROMPT} # {i}", "max_new_tokens": 24} for i in range(3)]
    statuses = await asyncio.gather(
        *(_submits(base, [60 + i], body) for i, body in enumerate([*bodies, POISON]))
    )
    return {"submit_statuses": [s[0] for s in statuses]}


def _wait_all(seconds: float) -> dict[str, int]:
    """Final statuses of every run, after waiting for the active ones to end."""
    from playground.models import Run

    deadline = time.monotonic() + seconds
    while _active() and time.monotonic() < deadline:
        time.sleep(1)
    counts: dict[str, int] = {}
    for status in Run.objects.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


async def _replays(stack: Stack) -> dict[str, Any]:
    import httpx

    base = stack.base
    async with _client(base, 70) as client:
        body = {"prompt": PROMPT, "max_new_tokens": 256, "top_k": 20, "temperature": 1}
        run = (await client.post("/api/v1/runs/", json=body)).json()
    _wait_all(240)
    assert stack.web is not None
    web = stack.web.pid
    before = rss_mib([web])
    peak = before
    hosts = list(range(80, 85))
    clients = [_client(base, h, limits=httpx.Limits(max_connections=22)) for h in hosts]
    await _warm(clients, "/api/v1/runs/models/")

    async def replay(client: httpx.AsyncClient) -> str:
        last = ""
        async with client.stream("GET", run["events_url"]) as response:
            if response.status_code != 200:
                return str(response.status_code)
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    last = line.partition(":")[2].strip()
        return last

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, rss_mib([web]))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    ends = await _together([lambda c=c: replay(c) for c in clients for _ in range(20)])
    sampler.cancel()
    for client in clients:
        await client.aclose()
    endings: dict[str, int] = {}
    for end in ends:
        key = end if isinstance(end, str) else type(end).__name__
        endings[key] = endings.get(key, 0) + 1
    return {"rss_mib_before": round(before), "rss_mib_peak": round(peak), "endings": endings}


async def _attack(stack: Stack, streams: int) -> dict[str, Any]:
    base = stack.base
    result: dict[str, Any] = {}
    statuses = await _submits(base, [1] * 20, {"prompt": PROMPT})
    result["one_address"] = {"created": statuses.count(201), "active": _active()}
    _clear_runs()
    statuses = await _submits(base, list(range(100, 150)), {"prompt": PROMPT})
    result["many_addresses"] = {"created": statuses.count(201), "active": _active()}
    _clear_runs()
    await _page_submits(base, 2, 12)
    result["fresh_cookies"] = {"active_from_one_address": _active()}
    _clear_runs()
    result["rates_passed"] = await _rates(base)
    result |= await _streams(stack, streams)
    _clear_runs()
    stack.start_worker()
    result["poison"] = await _poison(base)
    result["poison"]["final"] = _wait_all(120)
    result["replays"] = await _replays(stack)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--streams", type=int, default=300, help="streams to open at once")
    args = parser.parse_args()
    with own_database(args.server) as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        redis = RedisServer(workdir)
        redis.start()
        # The attacks' event loop reads the database between bursts, one call at a time.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        env = {"REDIS_URL": redis.url, "PLAYGROUND_MODELS": f"ouro-tiny={TINY}"} | DEFAULTS
        django_setup(url, **env)
        from benchmarks.playground import PRODUCTION
        from tests.playground.stack import Stack  # noqa: F811 (the class, now at run time)

        stack = Stack(workdir, database_url=url, redis_url=redis.url)
        stack.env.update(PRODUCTION | env)
        stack.start_web()  # the worker starts later: until then runs stay queued and quiet
        try:
            result = asyncio.run(_attack(stack, args.streams))
        finally:
            stack.stop()
            redis.kill()
    for name, value in result.items():
        print(f"{name}: {json.dumps(value)}")


if __name__ == "__main__":
    main()
