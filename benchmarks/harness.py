"""What the benchmarks share: a PostgreSQL database of their own, the atlas, synthetic works.

Each run creates a fresh database named ``loopatlas_bench_<pid>`` on the server given by
``--server`` and drops it when it ends (even on failure), so no one else's data is ever
touched. Timings are noisy on a shared machine: every benchmark also measures a baseline
in the same run and reports ratios against it.
"""

import os
import random
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432"


@contextmanager
def own_database(server: str) -> Iterator[str]:
    """Create ``loopatlas_bench_<pid>`` on ``server``, yield its URL, drop it afterwards."""
    name = f"loopatlas_bench_{os.getpid()}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def django_setup(database_url: str, **environment: str) -> None:
    """Production-style settings (DEBUG off) on the benchmark's database."""
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "loopatlas.settings.base",
            "DATABASE_URL": database_url,
            "DEBUG": "0",
            "SECRET_KEY": "benchmark-only-" + "x" * 40,
            "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
            "SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback
            "LOG_LEVEL": "WARNING",
        }
        | environment
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("collectstatic", verbosity=0, interactive=False)  # the manifest DEBUG-off needs
    call_command("migrate", verbosity=0)
    call_command("load_atlas", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115


def add_synthetic_works(count: int, *, seed: int = 2026) -> None:
    """``count`` more works, facets drawn from the real atlas's own distributions."""
    from atlas.datafile import DEFAULT_PATH, records_from_file
    from atlas.records import WorkRecord
    from atlas.services import atlas_load

    rng = random.Random(seed)
    real = records_from_file(DEFAULT_PATH)
    words = " ".join(record.values["summary"] for record in real).split()
    records = []
    for i in range(count):
        template = rng.choice(real).values
        values = dict(template) | {
            "n": 1000 + i,
            "slug": f"synthetic-work-{i}",
            "title": " ".join(rng.choices(words, k=8)).capitalize(),
            "summary": " ".join(rng.choices(words, k=60)),
            "authors": [f"Synthetic Author{i}", "Second Author"],
            "short_names": [],  # each curated name belongs to one work
            "month": template["month"].replace(year=rng.randint(2016, 2026)),
        }
        for facet in ("recurrence_family", "depth_control", "kv_strategy", "modality"):
            values[facet] = rng.choice(real).values[facet]
        records.append(WorkRecord(values))
    atlas_load(records=records, source=f"{count} synthetic works")
    from django.db import connection

    with connection.cursor() as cursor:  # what autovacuum does to a settled table
        cursor.execute("VACUUM ANALYZE")


@dataclass(frozen=True)
class Timing:
    """Milliseconds of a set of requests."""

    samples: list[float]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        return self.percentile(95)
