"""What the atlas's derived data costs as it grows: recomputing authors and related works
after a change, and the server time of the pages that read them, on PostgreSQL.

    python -m benchmarks.related [--server postgres://postgres@127.0.0.1:5432] [--rounds 10]

At the curated atlas's size and with 20,000 synthetic works more: ``authors_sync`` and
``related_refresh`` (forced: what each recorded change runs after its commit), median and
spread of ``--repeats`` runs; then a work page, an author page and Explore, the same
requests in the same run, so the pages compare with each other on the same machine.
"""

import argparse
import statistics
import time
from collections.abc import Callable

from benchmarks.harness import (
    DEFAULT_SERVER,
    Timing,
    add_synthetic_works,
    django_setup,
    own_database,
)


def _seconds(run: Callable[[], object], repeats: int) -> str:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    spread = f"{min(samples):.2f}–{max(samples):.2f}"
    return f"median {statistics.median(samples):.2f} s (range {spread}, n={repeats})"


def _refresh() -> None:
    from atlas.models import RelatedWork
    from atlas.related import related_refresh

    RelatedWork.objects.all().delete()  # as after a change: nothing stored for the version
    related_refresh()


def _pages(rounds: int) -> list[str]:
    from django.test import Client

    from atlas.models import Author

    client = Client()
    author = Author.objects.order_by("-slug").values_list("slug", flat=True).first()
    paths = {
        "work page": "/works/scaling-latent-reasoning-via-looped-language-models/",
        "author page": f"/authors/{author}/",
        "Explore": "/",
        "map": "/map/",
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for path in paths.values():  # warm up
        assert client.get(path).status_code in (200, 404), path
    for _ in range(rounds):
        for name, path in paths.items():
            start = time.perf_counter()
            status = client.get(path).status_code
            times[name].append((time.perf_counter() - start) * 1000)
            if status == 404:
                times[name] = []
    lines = []
    for name, samples in times.items():
        if samples:
            timing = Timing(samples)
            lines.append(f"    {name:>11}: p50 {timing.p50:6.1f} ms  p95 {timing.p95:6.1f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--rounds", type=int, default=10, help="requests per page")
    parser.add_argument("--repeats", type=int, default=3, help="recomputations timed")
    args = parser.parse_args()
    with own_database(args.server) as url:
        django_setup(url)
        from atlas.authors import authors_sync
        from atlas.models import Work

        report = []
        for extra in (0, 20_000):
            if extra:
                add_synthetic_works(extra)
            report.append(f"{Work.objects.count()} works")
            report.append(f"    authors_sync:    {_seconds(authors_sync, args.repeats)}")
            report.append(f"    related_refresh: {_seconds(_refresh, args.repeats)}")
            report += _pages(args.rounds)
    print("\n".join(report))


if __name__ == "__main__":
    main()
