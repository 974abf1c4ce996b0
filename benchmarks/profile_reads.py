"""Where the time of an uncached read goes, at the curated atlas's size and with 20,000 works more.

    python -m benchmarks.profile_reads [--server postgres://postgres@127.0.0.1:5432] [--repeat 20]

Each read goes through Django's full stack in-process (no network), on PostgreSQL, with
every cache of a read turned off (``API_CACHE_SECONDS=0``; the per-version caches are
cleared before each request), under cProfile. The profile's own time is split by where
the code lives: the database (Django's SQL compiler, psycopg), building Python objects
(models, querysets, serializer fields), rendering (JSON, CSV, templates) and the rest of
Django (middleware, URL routing, request and response). The split is what to read;
cProfile slows Python code, not the database, so absolute times are inflated.
"""

import argparse
import cProfile
import pstats
import time
from collections import defaultdict

from benchmarks.harness import DEFAULT_SERVER, add_synthetic_works, django_setup, own_database

READS = {
    "Explore": "/",
    "Explore, filtered": "/?recurrence_family=looped-lm&depth_control=exit-gate",
    "works/ page of 50": "/api/v1/works/?page_size=50",
    "export CSV (all)": "/api/v1/export/?format=csv",
    "a work page": None,  # the newest work's page, found at run time
}
# First match wins: a function is counted where its file lives.
PARTS = (
    ("database", ("psycopg", "django/db/backends", "django/db/models/sql")),
    ("templates", ("django/template", "templatetags", "django/forms")),
    (
        "rendering",
        ("renderers", "json/", "orjson", "csv", "exports.py", "citation.py", "encoders"),
    ),
    (
        "objects",
        (
            "django/db/models",
            "rest_framework/serializers",
            "rest_framework/fields",
            "serializers.py",
            "records.py",
            "selectors.py",
            "explore.py",
            "filters.py",
            "django_filters",
        ),
    ),
    ("django", ("django/", "rest_framework/", "asgiref", "servestatic")),
)


def _part(filename: str) -> str:
    for name, markers in PARTS:
        if any(marker in filename for marker in markers):
            return name
    return "other"


def _split(stats: pstats.Stats) -> dict[str, float]:
    """Own time per part; a built-in (``str.translate``, ``isinstance``) counts where its
    callers live, shared in proportion to the time each caller spent in it."""
    seconds: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, own, _cum, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename != "~" or not callers:
            seconds[_part(filename)] += own
            continue
        spent = sum(timing[2] for timing in callers.values()) or 1.0
        for (caller_file, _l, _n), timing in callers.items():
            seconds[_part(caller_file)] += own * timing[2] / spent
    return seconds


def profile(path: str, repeat: int) -> tuple[float, dict[str, float]]:
    """Median wall milliseconds unprofiled, and the profiled split in percent."""
    from django.core.cache import caches
    from django.test import Client

    client = Client()

    def read() -> None:
        for cache in caches.all():
            cache.clear()
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        response.getvalue()  # a streamed export is read to its end

    read()  # warm up: imports, templates, query plans
    wall = []
    for _ in range(repeat):
        start = time.perf_counter()
        read()
        wall.append((time.perf_counter() - start) * 1000)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        read()
    profiler.disable()
    split = _split(pstats.Stats(profiler))
    total = sum(split.values()) or 1.0
    wall.sort()
    return wall[len(wall) // 2], {part: 100 * s / total for part, s in split.items()}


def _report(label: str, repeat: int) -> list[str]:
    from atlas.models import Work

    newest = Work.objects.order_by("-month", "-position").values_list("slug", flat=True).first()
    lines = [f"-- {label}"]
    for name, path in READS.items():
        path = path or f"/works/{newest}/"
        median, split = profile(path, repeat)
        parts = "  ".join(f"{part} {share:4.1f}%" for part, share in sorted(split.items()))
        lines.append(f"{name:>20}: {median:7.1f} ms   {parts}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server URL")
    parser.add_argument("--repeat", type=int, default=20, help="requests per read")
    args = parser.parse_args()
    with own_database(args.server) as url:
        django_setup(url, API_CACHE_SECONDS="0")
        from atlas.models import Work

        lines = _report(f"{Work.objects.count()} works", args.repeat)
        add_synthetic_works(20_000)
        lines += _report(f"{Work.objects.count()} works", args.repeat)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
