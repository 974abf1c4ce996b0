"""Server time of a work's page and the map, with the atlas and with 20,000 more works.

    python -m benchmarks.pages [--server postgres://postgres@127.0.0.1:5432] [--rounds 20]

Requests go through Django's full stack in-process (middleware, views, queries,
templates; no network), on PostgreSQL. The pages: the newest work's (a typical one), the
page of the work most others mention (Ouro: with 20,000 works more, about two thousand synthetic
summaries name it, so its page lists them all), and the map of mentions. The baseline is
the Compare page's empty state (as in ``benchmarks.explore``), measured in the same rounds.
Goal on a 2-core machine: a work page within 3x the baseline with 20,000 works more.
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

BASELINE = "/compare/"
SYNTHETIC = 20_000


def _pages() -> dict[str, str]:
    from django.db.models import Count

    from atlas.models import RelatedWork, Work

    newest = Work.objects.order_by("-month", "position", "slug").values_list("slug", flat=True)
    mentioned = (
        RelatedWork.objects.filter(kind=RelatedWork.Kind.MENTIONED_BY)
        .values("work__slug")
        .annotate(n=Count("pk"))
        .order_by("-n", "work__slug")
        .values_list("work__slug", flat=True)
    )
    return {
        "baseline": BASELINE,
        "newest work": f"/works/{newest.first()}/",
        "most mentioned": f"/works/{mentioned.first()}/",
        "map": "/map/",
    }


def measure(rounds: int) -> dict[str, Timing]:
    """Each page once per round, the baseline among them."""
    from django.test import Client

    client = Client()
    pages = _pages()
    samples: dict[str, list[float]] = {name: [] for name in pages}
    for round_ in range(rounds + 1):  # the first round warms up: templates, query plans
        for name, path in pages.items():
            start = time.perf_counter()
            response = client.get(path)
            elapsed = (time.perf_counter() - start) * 1000
            assert response.status_code == 200, (path, response.status_code)
            if round_:
                samples[name].append(elapsed)
    return {name: Timing(ms) for name, ms in samples.items()}


def _report(label: str, timings: dict[str, Timing]) -> list[str]:
    baseline = timings["baseline"].p50
    return [f"-- {label}"] + [
        f"{name:>15}: p50 {timing.p50:7.1f} ms  p95 {timing.p95:7.1f} ms   "
        f"p50/baseline-p50 {timing.p50 / baseline:5.1f}x"
        for name, timing in timings.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--rounds", type=int, default=20, help="requests per page")
    args = parser.parse_args()
    with own_database(args.server) as url:
        django_setup(url)
        from atlas.models import Work

        lines = _report(f"{Work.objects.count()} works", measure(args.rounds))
        add_synthetic_works(SYNTHETIC)
        lines += _report(f"{Work.objects.count()} works", measure(args.rounds))
    print(f"Server time of pages, {args.rounds} rounds")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
