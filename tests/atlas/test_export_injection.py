"""A value a curator approved cannot change an export's structure: no BibTeX field, no RIS
tag or record, no CSV formula or row of its own; and a work's URL is one plain http(s) URL.

The values go the way a visitor's would: suggested through the API, approved, exported,
and read back by real parsers (and, for BibTeX, by BibTeX's own rule that every brace
counts, escaped or not).
"""

import csv
import io

import bibtexparser
import pytest
import rispy
from bibtexparser.middlewares import LatexDecodingMiddleware
from django.core.management import call_command
from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

from atlas.exports import bibtex_entry, export_csv, export_ris
from atlas.models import Suggestion, Work
from atlas.services import suggestion_approve

pytestmark = pytest.mark.django_db

WORK = "universal-transformers"
# Unpaired braces, alone and beside paired ones (which stay \{ \}, as LaTeX writes them).
BRACES = ["Loops}}, publisher = {Mallory", "{Loops}}}, publisher = {{Mallory} and {more}"]
RECORD_BREAK = "A looped model.\nER  - \n\nTY  - JOUR\nTI  - Injected\u2028KW  - evil"
FORMULAS = ['=HYPERLINK("http://evil.example/","x")', "+1+1", "-2+3", "@SUM(A1:A9)"]


def _approved(client, curator, field: str, value: str) -> None:
    body = {"work": WORK, "field": field, "proposed_value": value, "rationale": "r"}
    response = client.post("/api/v1/suggestions/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    suggestion_approve(
        suggestion=Suggestion.objects.get(pk=response.json()["id"]), reviewer=curator
    )


def _export(client, fmt: str) -> str:
    response = client.get(f"/api/v1/export/?format={fmt}")
    assert response.status_code == 200
    return response.content.decode()


def _rows(client) -> list[dict]:
    """The rows every export is rendered from."""
    return client.get("/api/v1/export/?format=json").json()["works"]


def _latex_decoder() -> LatexNodes2Text:
    context = get_default_latex_context_db()
    macros = [MacroTextSpec("textbraceleft", "{"), MacroTextSpec("textbraceright", "}")]
    context.add_context_category("braces", prepend=True, macros=macros)
    return LatexNodes2Text(latex_context=context)


def _bibtex_fields_by_brace_count(entry: str) -> list[str]:
    """The field names of one entry as BibTeX itself reads them: a braced value ends at
    the brace that balances its first, a backslash before a brace changing nothing."""
    names, depth, name, at = [], 0, "", entry.index(",") + 1
    while at < len(entry):
        char, at = entry[at], at + 1
        if depth == 0 and char == "=":
            names.append(name.strip(" ,\n"))
            name = ""
        elif depth == 0 and char == "}":
            break
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif depth == 0:
            name += char
    return names


def _entry(client) -> tuple[str, dict]:
    row = next(row for row in _rows(client) if row["slug"] == WORK)
    return bibtex_entry(row), row


def test_hyphens_in_a_title_stay_hyphens_in_bibtex(client, small_atlas, curator) -> None:
    title = "CART: Context-Anchored Recurrent Transformer -- A Study --- of Loops"
    _approved(client, curator, "title", title)
    library = bibtexparser.parse_string(
        _export(client, "bibtex"),
        append_middleware=[LatexDecodingMiddleware(decoder=_latex_decoder())],
    )
    assert title in [entry["title"] for entry in library.entries]


@pytest.mark.parametrize("title", BRACES)
def test_a_title_with_braces_adds_no_bibtex_field(client, small_atlas, curator, title) -> None:
    # given the entry's fields before
    before, _ = _entry(client)
    # when a title that closes its braces and opens a field of its own is approved
    _approved(client, curator, "title", title)
    # then BibTeX and bibtexparser read the same fields, and the title as it was given
    after, _ = _entry(client)
    assert _bibtex_fields_by_brace_count(after) == _bibtex_fields_by_brace_count(before)
    library = bibtexparser.parse_string(
        _export(client, "bibtex"),
        append_middleware=[LatexDecodingMiddleware(decoder=_latex_decoder())],
    )
    assert library.failed_blocks == []
    entry = next(e for e in library.entries if e["title"] == title)
    assert "publisher" not in entry.fields_dict


def test_a_stored_url_with_braces_adds_no_bibtex_field(client, small_atlas) -> None:
    # given a URL that input refuses (below) but that was stored all the same
    _, row = _entry(client)
    row["url"] = "https://example.org/a},\n  publisher = {Mallory"
    # when
    entry = bibtex_entry(row)
    # then it stays one value, percent-encoded
    assert "publisher" not in _bibtex_fields_by_brace_count(entry)
    (parsed,) = bibtexparser.parse_string(entry).entries
    assert parsed["url"] == "https://example.org/a%7D,%0A%20%20publisher%20=%20%7BMallory"


def test_a_summary_with_line_breaks_ends_no_ris_record(client, small_atlas, curator) -> None:
    # given
    count = len(rispy.loads(_export(client, "ris")))
    # when a summary that ends its record and starts another is approved
    _approved(client, curator, "summary", RECORD_BREAK)
    # then every record is still one work, and the summary its one abstract
    records = rispy.loads(_export(client, "ris"))
    assert len(records) == count
    (record,) = [record for record in records if record["abstract"].startswith("A looped")]
    assert record["abstract"] == " ".join(RECORD_BREAK.splitlines())
    assert "evil" not in record["keywords"]


def test_line_breaks_in_any_ris_value_stay_inside_it(client, small_atlas) -> None:
    rows = _rows(client)
    rows[0] |= {"title": "T\r\nER  - ", "authors": ["A\rTY  - X"], "venue": "ICML 2026\x85ER  - "}
    records = rispy.loads(export_ris(rows, "v"))
    assert len(records) == len(rows)
    assert records[0]["title"] == "T ER  -"


@pytest.mark.parametrize("formula", FORMULAS)
def test_a_formula_title_is_an_inert_csv_cell(client, small_atlas, curator, formula) -> None:
    # when
    _approved(client, curator, "title", formula)
    # then the cell starts with an apostrophe, so a spreadsheet shows it
    rows = list(csv.DictReader(io.StringIO(_export(client, "csv"))))
    (row,) = [row for row in rows if row["slug"] == WORK]
    assert row["title"] == "'" + formula


def test_a_formula_author_list_is_an_inert_csv_cell(client, small_atlas, curator) -> None:
    _approved(client, curator, "authors", "@SUM(1+1); Ada Lovelace")
    rows = list(csv.DictReader(io.StringIO(_export(client, "csv"))))
    (row,) = [row for row in rows if row["slug"] == WORK]
    assert row["authors"] == "'@SUM(1+1);Ada Lovelace"


def test_tab_and_carriage_return_starts_are_inert_and_a_line_break_no_row(client, small_atlas):
    rows = _rows(client)
    rows[0] |= {"title": "\t=1", "venue": "\r=1", "summary": "a\r\nb,c\n=2"}
    parsed = list(csv.DictReader(io.StringIO(export_csv(rows, "v"))))
    assert len(parsed) == len(rows)
    assert (parsed[0]["title"], parsed[0]["venue"]) == ("'\t=1", "'\r=1")
    assert parsed[0]["summary"] == "a\r\nb,c\n=2"  # inside its quoted cell


def test_no_value_of_the_curated_atlas_is_altered(client) -> None:
    """The guards touch only what the curated atlas does not hold (its exports stay byte
    for byte what they were): no formula start, brace or line break."""
    call_command("load_atlas", stdout=io.StringIO())
    cells = [cell for row in csv.reader(io.StringIO(_export(client, "csv"))) for cell in row]
    assert not [cell for cell in cells if cell.startswith("'")]
    assert "textbrace" not in _export(client, "bibtex")
    assert all(
        len(value.splitlines()) < 2
        for row in _rows(client)
        for value in row.values()
        if isinstance(value, str)
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/a},author={Mallory",
        "https://example.org/a https://example.org/b",
        "https://example.org/a\nhttps://example.org/b",
        'https://example.org/"onmouseover="x',
        "https://example.org/a\\b",
        "https://example.org/<x>",
        "javascript:alert(1)",
    ],
)
def test_a_suggested_url_is_one_plain_http_url(client, small_atlas, url) -> None:
    body = {"work": WORK, "field": "url", "proposed_value": url, "rationale": "r"}
    response = client.post("/api/v1/suggestions/", body, content_type="application/json")
    assert response.status_code == 400
    assert "http(s) URL" in response.json()["errors"]["proposed_value"][0]
    assert not Suggestion.objects.exists()


@pytest.mark.parametrize("field", ["title", "venue", "authors"])
def test_a_one_line_field_refuses_a_line_break(client, small_atlas, field) -> None:
    body = {"work": WORK, "field": field, "proposed_value": "A\nER  - ", "rationale": "r"}
    response = client.post("/api/v1/suggestions/", body, content_type="application/json")
    assert response.status_code == 400
    assert "must be one line" in response.json()["errors"]["proposed_value"][0]


def test_a_suggested_url_that_is_plain_is_accepted(client, small_atlas, curator) -> None:
    _approved(client, curator, "url", "https://example.org/paper?id=1&v=2#sec-3")
    assert Work.objects.get(slug=WORK).url == "https://example.org/paper?id=1&v=2#sec-3"
