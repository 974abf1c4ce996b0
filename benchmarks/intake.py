"""The intake through the real stack: how long from a proposal's submission until its work
is visible once accepted, and what a feed request costs next to the API's ``works/``.

    python -m benchmarks.intake [--server postgres://postgres@127.0.0.1:5432] [--repeats 7]

The server is uvicorn as deployed (DEBUG off, ``--no-proxy-headers``) on a PostgreSQL
database of the run's own with the curated atlas. Submit-to-visible: the proposal is
POSTed over HTTP, the curator's acceptance runs the admin's service in this process on the
same database, and the work counts as visible once the API's search, Explore's search and
the search's feed all answer with it (polled every 10 ms). Feed cost: sequential requests
to each target, on a server with the read cache (the default) and one without it
(``API_CACHE_SECONDS=0``), as ratios to ``works/`` (page of 50) in the same run. Every
number is a median over ``--repeats`` runs with its range (min–max).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from atlas.datafile import DEFAULT_PATH, records_from_file
from benchmarks.api import _free_port, _wait_until_up
from benchmarks.harness import DEFAULT_SERVER, django_setup, own_database

TARGETS = {
    "works/ page of 50": "/api/v1/works/?page_size=50",
    "feed, all works": "/feeds/works.atom",
    "feed of a search": "/feeds/works.atom?depth_control=exit-gate&search=loop",
    "feed of changes": "/feeds/changes.atom",
}


NAMES = ("Orchard", "Basalt", "Quillwort", "Meridian", "Tamarind", "Vesper", "Cobalt",
         "Juniper", "Saffron", "Halcyon", "Larkspur", "Obsidian")  # fmt: skip


def spread(samples: list[float]) -> str:
    return f"{statistics.median(samples):8.1f} ms (range {min(samples):.1f}–{max(samples):.1f})"


@contextmanager
def server(cache_seconds: str) -> Iterator[str]:
    port = _free_port()
    environment = os.environ | {
        "API_CACHE_SECONDS": cache_seconds,
        "THROTTLE_PROPOSALS": "1000000/hour",  # the server is measured, not the limit
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "loopatlas.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-proxy-headers", "--log-level", "warning"],
        env=environment,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_up(base + "/api/v1/")
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def _until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the accepted work did not become visible")
        time.sleep(0.01)


def submit_to_visible(base: str, n: int) -> dict[str, float]:
    """Milliseconds of one proposal's way: submit, accept, visible in API, Explore, feed."""
    from atlas.models import Proposal
    from atlas.proposals import proposal_accept

    word = f"benchmarkloop{os.getpid()}x{n}"  # in the summary: what the searches look for
    title = f"{NAMES[n % len(NAMES)]}: a looped depth study ({n})"  # no two near-identical
    data = {
        "title": title,
        "url": f"https://example.org/{word}",
        "month": "2026-11",
        "summary": f"A looped model measured by the intake benchmark ({word}).",
        "recurrence_family": "looped-lm",
        "rationale": "Benchmark.",
    }
    with httpx.Client(base_url=base, timeout=30) as client:
        start = time.perf_counter()
        response = client.post("/api/v1/proposals/", json=data)
        response.raise_for_status()
        submitted = time.perf_counter()
        proposal_accept(proposal=Proposal.objects.get(pk=response.json()["id"]), reviewer=None)
        accepted = time.perf_counter()
        _until(lambda: client.get("/api/v1/works/", params={"search": word}).json()["count"] == 1)
        _until(lambda: title in client.get("/", params={"search": word}).text)
        _until(lambda: title in client.get("/feeds/works.atom", params={"search": word}).text)
        visible = time.perf_counter()
    return {
        "submit (HTTP)": (submitted - start) * 1000,
        "accept (service)": (accepted - submitted) * 1000,
        "visible (API, Explore, feed)": (visible - accepted) * 1000,
        "submit to visible": (visible - start) * 1000,
    }


def request_costs(base: str, *, requests: int) -> dict[str, float]:
    """Median milliseconds per request of each target (after one warm-up request)."""
    costs = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        for label, path in TARGETS.items():
            client.get(path).raise_for_status()
            samples = []
            for _ in range(requests):
                start = time.perf_counter()
                client.get(path).raise_for_status()
                samples.append((time.perf_counter() - start) * 1000)
            costs[label] = statistics.median(samples)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--requests", type=int, default=30, help="per target and repeat")
    args = parser.parse_args()
    with own_database(args.server) as database_url:
        django_setup(database_url)
        with server("3600") as base:
            ways = [submit_to_visible(base, n) for n in range(args.repeats)]
            cached = [request_costs(base, requests=args.requests) for _ in range(args.repeats)]
        with server("0") as base:
            uncached = [request_costs(base, requests=args.requests) for _ in range(args.repeats)]
    works = len(records_from_file(DEFAULT_PATH))
    print(f"uvicorn, PostgreSQL, {works} works + accepted ones; {args.repeats} repeats")
    for phase in ways[0]:
        print(f"{phase:>30}: {spread([way[phase] for way in ways])}")
    for name, runs in (("cached", cached), ("uncached", uncached)):
        for label in TARGETS:
            ratios = [run[label] / run["works/ page of 50"] for run in runs]
            print(
                f"{name:>8} {label:>20}: {spread([run[label] for run in runs])}  "
                f"{statistics.median(ratios):4.2f}x works/ "
                f"(range {min(ratios):.2f}–{max(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
