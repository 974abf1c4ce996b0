"""Atlas fixtures: the small hand-made atlas, valid rows to vary, and data files to write."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from atlas.datafile import records_from_file
from atlas.models import AtlasChange, Work
from atlas.records import record_from_row
from atlas.services import atlas_load, suggestion_approve, suggestion_submit

SMALL_ATLAS = Path(__file__).parent / "data" / "works.yaml"


@pytest.fixture
def small_atlas(db) -> list[str]:
    """The eight works of tests/atlas/data/works.yaml, loaded; returns their slugs."""
    records = records_from_file(SMALL_ATLAS)
    atlas_load(records=records, source=SMALL_ATLAS.name)
    return [record.slug for record in records]


def make_row(n: int = 1, **overrides: Any) -> dict[str, Any]:
    """A valid data-file row, different for each ``n``."""
    row = {
        "n": n,
        "slug": f"work-{n}",
        "title": f"Work number {n}",
        "summary": f"A looped model, number {n}.",
        "month": f"20{10 + n % 15:02d}-{1 + n % 12:02d}",
        "month_estimated": False,
        "arxiv_id": None,
        "url": None,
        "code_url": None,
        "authors": [f"Ada Lovelace{n}"],
        "authors_et_al": False,
        "venue": None,
        "facts_confidence": None,
        "facts_source": None,
        "recurrence_family": "looped-lm",
        "depth_control": "fixed",
        "depth_granularity": "none",
        "kv_strategy": "unspecified",
        "training_regime": "from-scratch",
        "modality": ["language"],
        "contribution": ["architecture"],
        "topics": [],
    }
    return row | overrides


@pytest.fixture
def data_file(tmp_path: Path) -> Callable[[list[Any]], Path]:
    """Writes rows as a data file and returns its path."""

    def write(rows: list[Any]) -> Path:
        path = tmp_path / "works.yaml"
        path.write_text(yaml.safe_dump({"works": rows}, allow_unicode=True), encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Throttle counters live in the cache; every test starts with none."""
    cache.clear()
    yield
    cache.clear()


def load_rows(count: int, **overrides: Any) -> None:
    """Load ``count`` generated works (``work-1`` … ``work-<count>``)."""
    rows = [make_row(n, **overrides) for n in range(1, count + 1)]
    atlas_load(records=[record_from_row(row) for row in rows], source="generated")


@pytest.fixture
def curator(db):
    """A staff member who reviews suggestions in the admin."""
    return get_user_model().objects.create_superuser("curator", "curator@example.org", "pw")


@pytest.fixture
def curator_client(curator) -> Client:
    client = Client()
    client.force_login(curator)
    return client


def approve_kv(curator, value: str = "no-kv", **evidence: str) -> AtlasChange:
    """A reviewed correction of Universal Transformers' KV strategy: a new data version."""
    suggestion = suggestion_submit(
        work=Work.objects.get(slug="universal-transformers"),
        field="kv_strategy",
        proposed_value=value,
        rationale="It says so.",
        **evidence,
    )
    suggestion_approve(suggestion=suggestion, reviewer=curator)
    return AtlasChange.objects.latest()
