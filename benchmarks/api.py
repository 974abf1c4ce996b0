"""Throughput and tail latency of the API under load, against gunicorn on PostgreSQL.

    python -m benchmarks.api [--server postgres://postgres@127.0.0.1:5432] [--seconds 15]
                             [--synthetic 20000]

Needs ``wrk`` (Debian: ``apt-get install wrk``), which generates the load from a second
process on loopback. The server is production-style: gunicorn, DEBUG off, persistent
database connections, the curated atlas (plus ``--synthetic`` generated works, as
``benchmarks.explore`` adds). The export throttle is raised for the run
(``THROTTLE_EXPORTS``) so that the server is measured rather than the limit. The baseline
is the API root (the same stack with no queries), loaded the same way in the same run.
Each target is loaded twice: with the read cache (``API_CACHE_SECONDS``, the default
setting; a repeated request costs one query) and without it (every request queries and
serializes).
Goal on a 2-core machine: ``works/`` (page of 50) at >= 300 req/s, p99 < 100 ms, no errors.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

from benchmarks.harness import DEFAULT_SERVER, add_synthetic_works, django_setup, own_database

TARGETS = {
    "baseline /api/v1/": "/api/v1/",
    "works/ page of 50": "/api/v1/works/?page_size=50",
    "export CSV (all)": "/api/v1/export/?format=csv",
}
_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class Load:
    requests_per_second: float
    p99_ms: float
    errors: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"the server did not answer {url} within {seconds} s")


def _wrk(url: str, *, seconds: int, connections: int) -> Load:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"\s99%\s+([\d.]+)(us|ms|s)\b", out)
    if rate is None or p99 is None:
        raise RuntimeError(f"wrk printed no rate or p99:\n{out}")
    rps = float(rate[1])
    value, unit = p99.groups()
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", out))
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    errors += sum(int(n) for n in socket_errors.groups()) if socket_errors else 0
    return Load(rps, float(value) * _UNITS[unit], errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--seconds", type=int, default=15, help="length of each load")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--synthetic", type=int, default=0, help="generated works to add")
    args = parser.parse_args()
    with own_database(args.server) as database_url:
        django_setup(database_url)  # migrate, load the atlas, collect static files
        if args.synthetic:
            add_synthetic_works(args.synthetic)
        results = {
            cache: _load_each_target(args, cache_seconds)
            for cache, cache_seconds in (("cached", "3600"), ("uncached", "0"))
        }
    print(
        f"gunicorn x{args.workers}, wrk -t2 -c{args.connections} -d{args.seconds}s, loopback, "
        f"{args.synthetic} synthetic works added"
    )
    for cache, loads in results.items():
        baseline = loads["baseline /api/v1/"]
        for label, load in loads.items():
            share = load.requests_per_second / baseline.requests_per_second
            print(
                f"{cache:>8} {label:>20}: {load.requests_per_second:8.1f} req/s  "
                f"p99 {load.p99_ms:7.1f} ms  errors {load.errors}   {share:4.2f}x baseline"
            )


def _load_each_target(args, cache_seconds: str) -> dict[str, Load]:
    port = _free_port()
    environment = os.environ | {
        "DB_CONN_MAX_AGE": "60",
        "THROTTLE_EXPORTS": "1000000/minute",
        "API_CACHE_SECONDS": cache_seconds,
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "loopatlas.wsgi:application",
         "--bind", f"127.0.0.1:{port}", "--workers", str(args.workers),
         "--log-level", "warning"],
        env=environment,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_up(base + "/api/v1/")
        loads = {}
        for label, path in TARGETS.items():
            _wrk(base + path, seconds=2, connections=args.connections)  # warm up
            loads[label] = _wrk(base + path, seconds=args.seconds, connections=args.connections)
        return loads
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
