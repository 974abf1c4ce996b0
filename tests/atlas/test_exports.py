"""The exports of the whole curated atlas, read back by real parsers (BibTeX, RIS, CSV)."""

import csv
import io
import json
import re
from collections import Counter

import bibtexparser
import pytest
import rispy
from bibtexparser.middlewares import LatexDecodingMiddleware
from django.core.management import call_command
from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

from atlas.datafile import DEFAULT_PATH, records_from_file
from atlas.exports import (
    CSV_COLUMNS,
    MONTHS,
    citation_key_base,
    export_csv,
    month_label,
    venue_kind,
)
from atlas.models import Work

WORKS = len(records_from_file(DEFAULT_PATH))
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


# The seed's twelve conference papers whose venue's year is not the preprint's: a
# hand-checked sample of the rule `_cited` states.
VENUE_YEARS = {
    "think-at-hard-selective-latent-iterations-to-improve": "2026",
    "efficient-parallel-samplers-for-recurrent-depth-models-and": "2026",
    "mesh-memory-as-state-highways-for-recursive-transformers": "2026",
    "ponderlm-pretraining-language-models-to-ponder-in-continuous": "2026",
    "relaxed-recursive-transformers-effective-parameter-sharing": "2025",
    "on-expressive-power-of-looped-transformers-theoretical": "2025",
    "looped-transformers-for-length-generalization": "2025",
    "looped-transformers-are-better-at-learning-learning": "2024",
    "cotformer-a-chain-of-thought-driven-architecture-with-budget": "2025",
    "sliced-recursive-transformer": "2022",
    "albert-a-lite-bert-for-self-supervised-learning-of-language": "2020",
    "universal-transformers": "2019",
}


def _cited(work: Work) -> tuple[str, str | None]:
    """The year and month a citation of the work gives: a conference or journal paper's
    venue's year where it names another year than the month's (without the month)."""
    years = re.findall(r"\b(?:19|20)[0-9]{2}\b", work.venue)
    proceedings = venue_kind(work.venue or None) in ("conference", "journal")
    if proceedings and years and years[0] != str(work.month.year):
        return years[0], None
    return str(work.month.year), None if work.month_estimated else f"{work.month:%m}"


def test_the_twelve_venue_years_are_the_curated_ones(curated_atlas) -> None:
    assert set(VENUE_YEARS) <= set(curated_atlas)
    for slug, year in VENUE_YEARS.items():
        work = curated_atlas[slug]
        assert year in work.venue and str(work.month.year) != year
        assert _cited(work) == (year, None)


def _bibtex_expected(work: Work) -> tuple[str, dict[str, str]]:
    kind = venue_kind(work.venue or None)
    year, month = _cited(work)
    fields = {"title": work.title, "year": year}
    fields["note"] = f"Loop Atlas: http://testserver/works/{work.slug}/"
    if not work.authors:
        fields["note"] += "; authors not known yet"
    if not (work.url or work.arxiv_id):
        fields["note"] += "; links not known yet"
    if work.authors:
        fields["author"] = " and ".join([*work.authors, *(["others"] * work.authors_et_al)])
    venue_field = {"conference": "booktitle", "journal": "journal", "other": "howpublished"}
    if kind in venue_field:
        fields[venue_field[kind]] = work.venue
    if work.arxiv_id:
        fields |= {"eprint": work.arxiv_id, "archivePrefix": "arXiv"}
    if work.url:
        fields["url"] = work.url
    if month:
        fields["month"] = MONTHS[int(month) - 1]
    entry_type = {"conference": "inproceedings", "journal": "article"}.get(kind, "misc")
    return entry_type, fields


def test_bibtex_round_trips_every_field_of_every_work(client, curated_atlas) -> None:
    # when
    library = bibtexparser.parse_string(
        _export(client, "bibtex"),
        append_middleware=[LatexDecodingMiddleware(decoder=_latex_decoder())],
    )
    # then: each entry holds exactly the fields its work implies, with the work's values
    by_key = {work.citation_key: work for work in curated_atlas.values()}
    for entry in library.entries:
        entry_type, fields = _bibtex_expected(by_key[entry.key])
        assert (entry.entry_type, entry.fields_dict.keys()) == (entry_type, fields.keys())
        assert {name: field.value for name, field in entry.fields_dict.items()} == fields
    types = Counter(entry.entry_type for entry in library.entries)
    assert types["inproceedings"] > 0 and types["misc"] > 0
    estimated = [entry for entry in library.entries if by_key[entry.key].month_estimated]
    assert estimated and all("month" not in entry.fields_dict for entry in estimated)


def test_ris_round_trips_every_field_of_every_work(client, curated_atlas) -> None:
    records = rispy.loads(_export(client, "ris"))
    by_key = {work.citation_key: work for work in curated_atlas.values()}
    venue_tag = {"conference": "secondary_title", "journal": "journal_name", "other": "publisher"}
    ris_type = {"preprint": "UNPB", "conference": "CONF", "journal": "JOUR", "other": "ELEC"}
    for record in records:
        work = by_key[record["id"]]
        kind = venue_kind(work.venue or None)
        expected = {
            "type_of_reference": ris_type[kind],
            "id": work.citation_key,
            "title": work.title,
            "year": _cited(work)[0],
            "urls": [url for url in (work.url, f"http://testserver/works/{work.slug}/") if url],
            "abstract": work.summary,
            "keywords": [work.recurrence_family, *work.topics],
            "name_of_database": record["name_of_database"],
        }
        if work.authors:
            expected["authors"] = work.authors
        if _cited(work)[1]:
            expected["date"] = f"{work.month:%Y/%m}"
        if kind in venue_tag:
            expected[venue_tag[kind]] = work.venue
        if work.arxiv_id:
            expected["accession_number"] = f"arXiv:{work.arxiv_id}"
        assert record == expected


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


def test_a_csv_evidence_cell_is_sorted_json_in_its_own_characters_or_empty() -> None:
    # given two works, one with evidence for two facets (given in reverse order), one without
    blank = dict.fromkeys(CSV_COLUMNS)
    evidence = {"kv_strategy": {"quote": "Schöne Grüße"}, "depth_control": {"page": 3}}
    rows = [blank | {"slug": "a", "evidence": evidence}, blank | {"slug": "b", "evidence": {}}]
    # when exported as CSV
    cells = [row["evidence"] for row in csv.DictReader(io.StringIO(export_csv(rows, "v")))]
    # then the evidence reads as sorted JSON with its characters kept, and nothing at all
    assert cells == ['{"depth_control": {"page": 3}, "kv_strategy": {"quote": "Schöne Grüße"}}', ""]


def test_csv_has_the_documented_header_and_one_row_per_work(client, curated_atlas) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(client, "csv"))))
    assert len(rows) == WORKS
    assert tuple(rows[0]) == CSV_COLUMNS
    deja = next(row for row in rows if row["title"] == DEJA_VU)
    work = curated_atlas[deja["slug"]]
    assert deja["modality"] == ";".join(work.modality)
    assert deja["authors"].split(";") == work.authors
    assert deja["month_estimated"] in {"true", "false"}
    for row in rows:
        work = curated_atlas[row["slug"]]
        assert row["month_label"] == month_label(f"{work.month:%Y-%m}", work.month_estimated)
        assert (json.loads(row["evidence"]) if row["evidence"] else {}) == work.evidence
    ouro = next(row for row in rows if row["slug"].startswith("scaling-latent-reasoning-via"))
    assert json.loads(ouro["evidence"])["depth_control"]["source"].startswith("seed 000")


@pytest.mark.parametrize(
    ("month", "estimated", "label"),
    [("2026-10", False, "Oct 2026"), ("2026-10", True, "not before Oct 2026")],
)
def test_an_estimated_month_is_labelled_as_the_bound_it_is(month, estimated, label) -> None:
    assert month_label(month, estimated) == label


@pytest.mark.parametrize(
    ("venue", "kind"),
    [
        (None, "preprint"),
        ("arXiv", "preprint"),
        ("alphaXiv preprint", "preprint"),
        ("ICML 2026", "conference"),
        ("NeurIPS 2025", "conference"),
        ("LIT Workshop @ ICLR 2026", "conference"),
        ("Transactions on Machine Learning Research", "journal"),
        ("blog post (no arXiv id yet)", "other"),
    ],
)
def test_venues_are_sorted_into_citation_kinds(venue, kind) -> None:
    assert venue_kind(venue) == kind


def test_json_states_the_data_version_and_holds_every_work(client, curated_atlas) -> None:
    document = json.loads(_export(client, "json"))
    assert document["count"] == len(document["works"]) == WORKS
    works = {work["slug"]: work for work in document["works"]}
    assert all(works[slug]["evidence"] == work.evidence for slug, work in curated_atlas.items())
    first = document["works"][0]
    assert first["month_estimated"] and first["month_label"].startswith("not before ")
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
        (["Mary Ann Evans", "Ada Lovelace"], "Middlemarch", "evans2026middlemarch"),
        (["Plato"], "The Republic", "plato2026republic"),
    ],
)
def test_citation_keys_are_ascii_surname_year_and_title_word(authors, title, key) -> None:
    assert citation_key_base(authors=authors, year=2026, title=title) == key
