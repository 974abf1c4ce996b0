"""What each export says about a work, read back by the real parsers: the month and year
for all twelve months, then every field for two works that differ in everything an export
branches on (a journal work with an arXiv id, URLs, a truncated author list, topics and an
estimated month; an arXiv-only work with none of them)."""

import csv
import io
import json

import bibtexparser
import pytest
import rispy

from atlas.exports import citation_key_base
from atlas.models import Work
from atlas.records import record_from_row
from atlas.services import atlas_load
from tests.atlas.conftest import load_rows, make_row

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

pytestmark = pytest.mark.django_db


@pytest.fixture
def twelve_months() -> dict[str, tuple[str, str]]:
    """Twelve works, one per calendar month; returns ``{title: (year, month)}``."""
    load_rows(12)
    works = {work.title: (f"{work.month:%Y}", f"{work.month:%m}") for work in Work.objects.all()}
    assert sorted(month for _, month in works.values()) == [f"{m:02d}" for m in range(1, 13)]
    return works


def _export_versioned(client, fmt: str, query: str = "") -> tuple[str, str]:
    """The export's text and the data version it states."""
    response = client.get(f"/api/v1/export/?format={fmt}&{query}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode(), response["X-Atlas-Data-Version"]


def _export(client, fmt: str) -> str:
    return _export_versioned(client, fmt)[0]


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


# -- every field

PAGE = "http://testserver/works/"
JOURNAL = make_row(
    1,
    slug="journal-work",
    title="Loops & {Depth}: 100% of it",
    summary="Recurrent depth, once more.",
    month="2024-04",
    month_estimated=True,
    arxiv_id="2404.01234",
    url="https://example.org/journal-work",
    code_url="https://example.org/code",
    authors=["Ada Lovelace", "Alan Turing"],
    authors_et_al=True,
    venue="Journal of Loops",
    topics=["halting", "kv-cache"],
)
PREPRINT = make_row(2, slug="preprint-work", title="Déjà Vu, Again", month="2025-11", venue="arXiv")


@pytest.fixture
def two_works() -> None:
    atlas_load(records=[record_from_row(JOURNAL), record_from_row(PREPRINT)], source="test")


def _keys(client) -> dict[str, str]:
    works = json.loads(_export_versioned(client, "json")[0])["works"]
    return {work["slug"]: work["citation_key"] for work in works}


def test_bibtex_fields_of_a_journal_work_and_a_preprint(client, two_works) -> None:
    text, version = _export_versioned(client, "bibtex")
    library = bibtexparser.parse_string(text)
    keys = _keys(client)
    # then: the comment and two entries, a blank line apart
    blocks = text.rstrip("\n").split("\n\n")
    assert len(blocks) == 3 and all(b.startswith("@") and b.endswith("}") for b in blocks)
    assert library.failed_blocks == []
    assert library.comments[0].comment == f"Loop Atlas export, 2 works, data version {version}"
    entries = {entry.key: entry for entry in library.entries}
    journal, preprint = entries[keys["journal-work"]], entries[keys["preprint-work"]]
    assert journal.entry_type == "article" and preprint.entry_type == "misc"
    assert {field.key: field.value for field in journal.fields} == {
        "title": r"{Loops \& \{Depth\}: 100\% of it}",
        "author": "Ada Lovelace and Alan Turing and others",
        "journal": "Journal of Loops",
        "year": "2024",
        "eprint": "2404.01234",
        "archivePrefix": "arXiv",
        "url": "https://example.org/journal-work",
        "note": f"Loop Atlas: {PAGE}journal-work/",
        # no month: an estimated month is a lower bound, not a month to cite
    }
    assert {field.key: field.value for field in preprint.fields} == {
        "title": "{Déjà Vu, Again}",
        "author": "Ada Lovelace2",
        "year": "2025",
        "note": f"Loop Atlas: {PAGE}preprint-work/; links not known yet",
        "month": "nov",
    }


def test_a_bibtex_export_of_one_work_says_one_work(client, two_works) -> None:
    text, version = _export_versioned(client, "bibtex", "works=preprint-work")
    assert text.startswith(f"@comment{{Loop Atlas export, 1 work, data version {version}}}\n\n")


def test_ris_fields_of_a_journal_work_and_a_preprint(client, two_works) -> None:
    text, version = _export_versioned(client, "ris")
    keys = _keys(client)
    records = {record["id"]: record for record in rispy.loads(text)}
    assert text.count("\nER  - \n") == 2  # each record ends with an empty ER line
    database = f"Loop Atlas (data version {version})"
    assert records[keys["journal-work"]] == {
        "type_of_reference": "JOUR",
        "id": keys["journal-work"],
        "title": "Loops & {Depth}: 100% of it",
        "authors": ["Ada Lovelace", "Alan Turing"],
        "year": "2024",  # no DA: the month is an estimate
        "journal_name": "Journal of Loops",
        "accession_number": "arXiv:2404.01234",
        "urls": ["https://example.org/journal-work", f"{PAGE}journal-work/"],
        "abstract": "Recurrent depth, once more.",
        "keywords": ["looped-lm", "halting", "kv-cache"],
        "name_of_database": database,
    }
    assert records[keys["preprint-work"]] == {
        "type_of_reference": "UNPB",
        "id": keys["preprint-work"],
        "title": "Déjà Vu, Again",
        "authors": ["Ada Lovelace2"],
        "year": "2025",
        "date": "2025/11",
        "urls": [f"{PAGE}preprint-work/"],
        "abstract": "A looped model, number 2.",
        "keywords": ["looped-lm"],
        "name_of_database": database,
    }


def test_csv_cells_of_a_journal_work_and_a_preprint(client, two_works) -> None:
    text, _ = _export_versioned(client, "csv")
    rows = {row["slug"]: row for row in csv.DictReader(io.StringIO(text))}
    journal, preprint = rows["journal-work"], rows["preprint-work"]
    assert (journal["month_estimated"], preprint["month_estimated"]) == ("true", "false")
    assert journal["authors"] == "Ada Lovelace;Alan Turing" and journal["authors_et_al"] == "true"
    assert journal["topics"] == "halting;kv-cache" and preprint["topics"] == ""
    assert (journal["code_url"], preprint["code_url"], preprint["arxiv_id"]) == (
        "https://example.org/code",
        "",
        "",
    )
    assert journal["page_url"] == f"{PAGE}journal-work/"


def test_json_states_the_version_and_count_and_each_file_is_named_by_the_version_date(
    client, two_works
) -> None:
    text, version = _export_versioned(client, "json")
    document = json.loads(text)
    assert (document["data_version"], document["count"]) == (version, 2)
    for fmt, extension in (("csv", "csv"), ("bibtex", "bib"), ("ris", "ris"), ("json", "json")):
        response = client.get(f"/api/v1/export/?format={fmt}")
        expected = f'attachment; filename="loop-atlas-{version[:10]}.{extension}"'
        assert response["Content-Disposition"] == expected


def test_json_is_indented_utf8_text(client, two_works) -> None:
    # a person reads the file too: one field a line, accents as themselves
    text, _ = _export_versioned(client, "json")
    assert '\n  "count": 2,\n' in text
    assert '"title": "Déjà Vu, Again"' in text


def test_a_title_of_stopwords_only_keys_the_work_as_work() -> None:
    key = citation_key_base(authors=["Ada Lovelace"], year=2024, title="On the")
    assert key == "lovelace2024work"
