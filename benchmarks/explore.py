"""Server time of the Explore page on PostgreSQL, with the atlas and with 20,000 more works.

    python -m benchmarks.explore [--server postgres://postgres@127.0.0.1:5432] [--rounds 20]

Requests go through Django's full stack in-process (middleware, views, queries,
templates; no network), over a fixed mix of filter combinations. The baseline is the
Compare page's empty state, measured in the same run: the same stack with no atlas
queries. Goal on a 2-core machine: p95 < 50 ms at the curated atlas's size, < 250 ms at 20,000.
"""

import argparse
import time

from benchmarks.harness import (
    DEFAULT_SERVER,
    Timing,
    add_synthetic_works,
    django_setup,
    own_database,
)

QUERIES = [
    "",
    "recurrence_family=looped-lm",
    "recurrence_family=universal&recurrence_family=partial-loop",
    "depth_control=exit-gate&kv_strategy=shared",
    "modality=language&contribution=architecture",
    "modality=vision",
    "training_regime=retrofit&modality=language",
    "topics=ouro",
    "month_from=2025-01&month_to=2025-12",
    "search=halting",
    "search=kv+cache+compression",
    "search=loop&recurrence_family=looped-lm&ordering=oldest",
    "ordering=title&page=2",
    "ordering=oldest&page=3",
]
BASELINE = "/compare/"
SYNTHETIC = 20_000


def _time(client, path: str, headers: dict) -> float:
    start = time.perf_counter()
    response = client.get(path, headers=headers)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, (path, response.status_code)
    return elapsed


def measure(rounds: int) -> tuple[Timing, Timing]:
    """Explore over the mix (full pages and htmx swaps alternating), and the baseline."""
    from django.test import Client

    client = Client()
    for query in QUERIES:  # warm up: template loading, query plans, caches
        _time(client, f"/?{query}", {})
    explore, baseline = [], []
    for round_ in range(rounds):
        headers = {"HX-Request": "true"} if round_ % 2 else {}
        for query in QUERIES:
            explore.append(_time(client, f"/?{query}", headers))
            baseline.append(_time(client, BASELINE, {}))
    return Timing(explore), Timing(baseline)


def _report(label: str, explore: Timing, baseline: Timing) -> str:
    return (
        f"{label:>14}: Explore p50 {explore.p50:6.1f} ms  p95 {explore.p95:6.1f} ms   "
        f"baseline p50 {baseline.p50:5.1f} ms   p95/baseline-p50 {explore.p95 / baseline.p50:5.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--rounds", type=int, default=20, help="passes over the query mix")
    args = parser.parse_args()
    with own_database(args.server) as url:
        django_setup(url)
        from atlas.models import Work

        lines = [_report(f"{Work.objects.count()} works", *measure(args.rounds))]
        add_synthetic_works(SYNTHETIC)
        lines.append(_report(f"{Work.objects.count()} works", *measure(args.rounds)))
    print(f"Explore server time, {len(QUERIES)} filter combinations x {args.rounds} rounds")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
