"""Every export states each work's month as what it is: read back by the real parsers, the
month and year of every export match the work's own, for all twelve months."""

import csv
import io
import json

import bibtexparser
import pytest
import rispy

from atlas.models import Work
from tests.atlas.conftest import load_rows

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

pytestmark = pytest.mark.django_db


@pytest.fixture
def twelve_months() -> dict[str, tuple[str, str]]:
    """Twelve works, one per calendar month; returns ``{title: (year, month)}``."""
    load_rows(12)
    works = {work.title: (f"{work.month:%Y}", f"{work.month:%m}") for work in Work.objects.all()}
    assert sorted(month for _, month in works.values()) == [f"{m:02d}" for m in range(1, 13)]
    return works


def _export(client, fmt: str) -> str:
    response = client.get(f"/api/v1/export/?format={fmt}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode("utf-8")


def test_bibtex_states_each_works_month_and_year(client, twelve_months) -> None:
    library = bibtexparser.parse_string(_export(client, "bibtex"))
    assert library.failed_blocks == []
    dates = {e["title"].strip("{}"): (e["year"], e["month"]) for e in library.entries}
    assert dates == {
        title: (year, MONTH_NAMES[int(month) - 1]) for title, (year, month) in twelve_months.items()
    }


def test_ris_dates_are_year_slash_month(client, twelve_months) -> None:
    records = rispy.loads(_export(client, "ris"))
    dates = {record["title"]: (record["year"], record["date"]) for record in records}
    assert dates == {
        title: (year, f"{year}/{month}") for title, (year, month) in twelve_months.items()
    }


def test_csv_and_json_state_the_month_as_year_dash_month(client, twelve_months) -> None:
    expected = {title: f"{year}-{month}" for title, (year, month) in twelve_months.items()}
    rows = csv.DictReader(io.StringIO(_export(client, "csv")))
    assert {row["title"]: row["month"] for row in rows} == expected
    works = json.loads(_export(client, "json"))["works"]
    assert {work["title"]: work["month"] for work in works} == expected
