"""PostgreSQL's query plans for each Explore filter combination, at the atlas and at 20,000 works.

    python -m benchmarks.explain [--server postgres://postgres@127.0.0.1:5432] [--synthetic 20000]

Each Explore request of ``benchmarks.explore``'s mix runs once with the caches cleared
(what the first reader after a new data version pays); every SELECT it sent is then run
again under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)``. Per request: the number of
queries, their summed execution time, the pages they touched (shared buffers hit or read:
the same on a busy machine as on a quiet one, where times are not), the slowest query's
time and the tables it read with a sequential scan, so a filter that scans where an index
would serve shows by name.
"""

import argparse
import json
from collections.abc import Iterator
from typing import Any

from benchmarks.explore import QUERIES
from benchmarks.harness import DEFAULT_SERVER, add_synthetic_works, django_setup, own_database


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def explain(sql: str) -> tuple[float, int, list[str]]:
    """Execution milliseconds, pages touched and the relations sequentially scanned, for
    one statement."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")
        (result,) = cursor.fetchone()
    top = (json.loads(result) if isinstance(result, str) else result)[0]
    scans = sorted(
        {n["Relation Name"] for n in _nodes(top["Plan"]) if n["Node Type"] == "Seq Scan"}
    )
    plan = top["Plan"]
    return top["Execution Time"], plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], scans


def report(label: str) -> list[str]:
    from django.core.cache import caches
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    header = f"  {'query':<58} {'n':>3} {'sum ms':>8} {'pages':>6} {'max ms':>8}  seq scans"
    lines = [f"{label}:", header]
    for query in QUERIES:
        for cache in caches.all():
            cache.clear()
        with CaptureQueriesContext(connection) as captured:
            client.get(f"/?{query}")
        plans = [explain(q["sql"]) for q in captured if q["sql"].lstrip().startswith("SELECT")]
        slowest = max(plans, default=(0.0, 0, []))
        total = sum(plan[0] for plan in plans)
        pages = sum(plan[1] for plan in plans)
        scans = ", ".join(slowest[2]) or "-"
        lines.append(
            f"  {query or '(none)':<58} {len(plans):>3} {total:>8.1f} {pages:>6} "
            f"{slowest[0]:>8.1f}  {scans}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--synthetic", type=int, default=20_000, help="works to add")
    args = parser.parse_args()
    with own_database(args.server) as url:
        django_setup(url)
        from atlas.models import Work

        lines = report(f"{Work.objects.count()} works")
        add_synthetic_works(args.synthetic)
        lines += report(f"{Work.objects.count()} works")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
