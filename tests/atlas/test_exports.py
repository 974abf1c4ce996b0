"""The exports of the whole curated atlas, read back by real parsers (BibTeX, RIS, CSV)."""

import csv
import io
import json

import bibtexparser
import pytest
import rispy
from bibtexparser.middlewares import LatexDecodingMiddleware
from django.core.management import call_command
from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

from atlas.exports import CSV_COLUMNS, citation_key_base
from atlas.models import Work

WORKS = 199
DEJA_VU = "Déjà View: Looping Transformers for Multi-View 3D Reconstruction"


@pytest.fixture
def curated_atlas(db) -> dict[str, Work]:
    call_command("load_atlas", stdout=io.StringIO())
    return {work.slug: work for work in Work.objects.all()}


def _export(client, fmt: str, query: str = "") -> str:
    response = client.get(f"/api/v1/export/?format={fmt}&{query}")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode("utf-8")


def _latex_decoder() -> LatexNodes2Text:
    # LaTeX's \textasciicircum is the ASCII circumflex; pylatexenc's default is U+02C6.
    context = get_default_latex_context_db()
    context.add_context_category(
        "ascii", prepend=True, macros=[MacroTextSpec("textasciicircum", "^")]
    )
    return LatexNodes2Text(latex_context=context)


def test_bibtex_has_one_valid_entry_per_work_with_unique_keys_and_exact_titles(
    client, curated_atlas
) -> None:
    # when
    library = bibtexparser.parse_string(
        _export(client, "bibtex"),
        append_middleware=[LatexDecodingMiddleware(decoder=_latex_decoder())],
    )
    # then
    assert library.failed_blocks == []
    assert len(library.entries) == WORKS
    keys = [entry.key for entry in library.entries]
    assert len(set(keys)) == WORKS
    titles = {entry.key: entry["title"] for entry in library.entries}
    by_key = {work.citation_key: work for work in curated_atlas.values()}
    assert titles == {key: work.title for key, work in by_key.items()}
    assert DEJA_VU in titles.values()
    assert "data version" in library.comments[0].comment


def test_bibtex_marks_arxiv_works_with_eprint_and_archive_prefix(client, curated_atlas) -> None:
    library = bibtexparser.parse_string(_export(client, "bibtex"))
    arxiv = [work for work in curated_atlas.values() if work.arxiv_id]
    entries = {entry.key: entry for entry in library.entries}
    for work in arxiv:
        entry = entries[work.citation_key]
        assert entry["eprint"] == work.arxiv_id and entry["archivePrefix"] == "arXiv"
        assert entry.entry_type in {"misc", "article"}


def test_citation_keys_are_stable_across_subsets(client, curated_atlas) -> None:
    everything = bibtexparser.parse_string(_export(client, "bibtex"))
    subset = bibtexparser.parse_string(_export(client, "bibtex", "recurrence_family=looped-lm"))
    full_keys = {entry["title"]: entry.key for entry in everything.entries}
    assert subset.entries
    assert all(full_keys[entry["title"]] == entry.key for entry in subset.entries)


def test_ris_has_one_record_per_work(client, curated_atlas) -> None:
    records = rispy.loads(_export(client, "ris"))
    assert len(records) == WORKS
    titles = {record["title"] for record in records}
    assert titles == {work.title for work in curated_atlas.values()}
    deja = next(record for record in records if record["title"] == DEJA_VU)
    assert deja["type_of_reference"] == "UNPB"
    assert "Laura Leal-Taixé" in deja["authors"] and deja["year"] == "2026"
    assert deja["name_of_database"].startswith("Loop Atlas (data version ")


def test_csv_has_the_documented_header_and_one_row_per_work(client, curated_atlas) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(client, "csv"))))
    assert len(rows) == WORKS
    assert tuple(rows[0]) == CSV_COLUMNS
    deja = next(row for row in rows if row["title"] == DEJA_VU)
    work = curated_atlas[deja["slug"]]
    assert deja["modality"] == ";".join(work.modality)
    assert deja["authors"].split(";") == work.authors
    assert deja["month_estimated"] in {"true", "false"}


def test_json_states_the_data_version_and_holds_every_work(client, curated_atlas) -> None:
    document = json.loads(_export(client, "json"))
    assert document["count"] == len(document["works"]) == WORKS
    assert document["data_version"].endswith("Z")


@pytest.mark.parametrize(
    ("accept", "fmt", "filename"),
    [
        ("text/csv", "csv", ".csv"),
        ("application/x-bibtex", "bibtex", ".bib"),
        ("application/x-research-info-systems", "ris", ".ris"),
        ("application/json", "json", ".json"),
    ],
)
def test_the_format_can_come_from_the_accept_header_and_names_the_file(
    client, small_atlas, accept, fmt, filename
) -> None:
    by_header = client.get("/api/v1/export/", headers={"Accept": accept})
    by_param = client.get(f"/api/v1/export/?format={fmt}")
    assert by_header.content == by_param.content
    assert by_header["Content-Type"].startswith(accept)
    disposition = by_header["Content-Disposition"]
    assert disposition.startswith('attachment; filename="loop-atlas-') and disposition.endswith(
        f'{filename}"'
    )
    assert by_header["X-Atlas-Data-Version"].endswith("Z")


def test_an_export_of_a_filtered_subset_holds_only_those_works(client, small_atlas) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(client, "csv", "modality=vision"))))
    assert {row["slug"] for row in rows} == {
        "looped-diffusion-transformer",
        "deja-view-looping-transformers-3d",
    }


def test_an_error_is_json_even_when_a_file_was_asked_for(client, small_atlas) -> None:
    response = client.get("/api/v1/export/?format=csv&kv_strategy=enormous")
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert "kv_strategy" in response.json()["errors"]


@pytest.mark.parametrize(
    ("authors", "title", "key"),
    [
        (["Laura Leal-Taixé"], "Déjà View: Looping", "lealtaixe2026deja"),
        (["Ada Lovelace"], "The Analytical Engine", "lovelace2026analytical"),
        ([], "On Loops: A Study", "loops2026"),
        (["Ł. Kaiser"], "T^2MLR", "kaiser2026t2mlr"),
    ],
)
def test_citation_keys_are_ascii_surname_year_and_title_word(authors, title, key) -> None:
    assert citation_key_base(authors=authors, year=2026, title=title) == key
